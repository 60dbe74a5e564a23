"""The quality report of a fitted generator beside GARCH(1,1)-t, a stationary block bootstrap and
filtered historical simulation, ending with each one's verdict on the goals (verdict.py).

Leaks that published numbers of this kind often carry are closed here:
- every model (generator and baselines) is fitted on the training split alone, and scaled
  with its statistics;
- the strict discriminative score judges non-overlapping windows, the judge learning on
  training-period windows and scored on real windows from after the training split's last date
  against fresh generated ones;
- the predictive score and the stylised facts compare against the real bars after that date (the
  held-out validation and test splits), which no model has seen.

Paths for the stylised facts continue from the training split's last bar's state (what the held-out
bars follow); the judges' windows start from random training bars' states (the real windows they are
told from come from the whole training split). GARCH-t and the bootstrap have no state: their paths
start from their stationary distribution.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from clstm_ppo.data.dataset import MarketData
from clstm_ppo.run_files.checkpoint import CheckpointError
from clstm_ppo.scenarios.bar_columns import bar_features, paths_frame, reconstruct
from clstm_ppo.scenarios.baselines import Bootstrap, Fhs, GarchT
from clstm_ppo.scenarios.fit import TrainingSet, training_set
from clstm_ppo.scenarios.generator import FittedGenerator
from clstm_ppo.scenarios.judge import (
    discriminative_score,
    non_overlapping,
    overlapping,
    predictive_score,
    strict_discriminative_score,
)
from clstm_ppo.scenarios.recognise import format_regimes, regime_report
from clstm_ppo.scenarios.stylised_facts import (
    excess_kurtosis,
    held_out_kurtosis,
    like_for_like,
    per_row_kurtosis,
    skew,
    stylised_facts,
)
from clstm_ppo.scenarios.verdict import drift, format_verdict, verdict

MODEL_KEYS = ("model", "garch_t", "bootstrap", "fhs")
BASELINES = {
    "garch_t": lambda ts: GarchT.fit(ts.raw, ts.names.index("ret")),
    "bootstrap": lambda ts: Bootstrap.fit(ts.raw, ts.names.index("ret")),
    "fhs": lambda ts: Fhs.fit(ts.raw, ts.names, ts.rule.window),
}
DRIFT_PATHS, DRIFT_BARS = 200, 1000
TIMED_PATHS, TIMED_BARS = 1000, 252


def held_out_features(data: MarketData, names: tuple[str, ...]) -> np.ndarray:
    """(S, T, F) columns of every bar after the training split (its last bar
    lends only its close)."""
    start = data.splits["train"][1] - 1
    return bar_features({k: v[:, start:] for k, v in data.bars.items()}, names)


def _windows_like(model: Any, ts: TrainingSet, n: int, seq_len: int, seed: int) -> np.ndarray:
    return ts.scaler.apply(model.sample_features(n, seq_len, None, seed, start="random"))


def timed_sample(model: Any, names: tuple[str, ...], start: dict[str, Any], seed: int) -> float:
    """Seconds to draw 1,000 paths of 252 bars and build the loader's table of them
    (the sampling goal)."""
    began = time.perf_counter()
    paths_frame(
        reconstruct(model.sample_features(TIMED_PATHS, TIMED_BARS, None, seed), names, start), start
    )
    return time.perf_counter() - began


def judge_scores(
    model: Any, ts: TrainingSet, held: np.ndarray, seq_len: int, runs: int, iters: int, seed: int
) -> dict[str, float]:
    """TimeGAN's two scores (released protocol) and the strict discriminative
    score, for one model."""
    real = overlapping(ts.scaled, seq_len)
    fake = _windows_like(model, ts, len(real), seq_len, seed + 1)
    held_scaled = ts.scaler.apply(held)
    train_real, test_real = (
        non_overlapping(ts.scaled, seq_len),
        non_overlapping(held_scaled, seq_len),
    )
    train_fake = _windows_like(model, ts, len(train_real), seq_len, seed + 2)
    test_fake = _windows_like(model, ts, len(test_real), seq_len, seed + 3)
    target = ts.names.index("ret")
    return {
        "discriminative_score": discriminative_score(real, fake, runs, iters, seed),
        "discriminative_score_strict": strict_discriminative_score(
            train_real, train_fake, test_real, test_fake, runs, iters, seed
        ),
        "predictive_score": predictive_score(
            fake, overlapping(held_scaled, seq_len), target, iters, seed
        ),
    }


def build_report(
    gen: FittedGenerator,
    data: MarketData,
    paths: int = 1000,
    length: int = 252,
    runs: int = 10,
    iters: int = 2000,
    seed: int = 0,
    plot_dir: Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Every number of the report, keyed by model (``model``, ``garch_t``, ``bootstrap``, ``fhs``),
    the regime blocks of a conditional model, and ``verdict``; optional plots."""
    ts = training_set(data, gen.regimes.window if gen.regimes else 20)
    if ts.names != gen.feature_names:
        raise CheckpointError(
            f"the checkpoint's columns ({', '.join(gen.feature_names)}) differ from what this "
            f"data source gives ({', '.join(ts.names)}); report on the data it was fitted on"
        )
    ret_col = ts.names.index("ret")
    held = held_out_features(data, ts.names)
    models, fit_seconds = {"model": gen}, {"model": float(gen.extra.get("train_seconds", np.nan))}
    for name, fit in BASELINES.items():
        began = time.perf_counter()
        models[name] = fit(ts)
        fit_seconds[name] = time.perf_counter() - began
    real_ret = held[..., ret_col]
    train_std = ts.raw.reshape(-1, ts.raw.shape[-1]).std(axis=0)
    report: dict[str, Any] = {
        "generator": gen.kind,
        "steps": gen.step,
        "seq_len": gen.seq_len,
        "paths": paths,
        "length": length,
        "judge_runs": runs,
        "judge_iters": iters,
        "columns": list(ts.names),
        "train": [gen.data.get("train_first"), gen.data.get("train_last")],
        "reference": "held-out real bars after the training split (validation + test)",
        "real_held_out": {
            "kurtosis": excess_kurtosis(real_ret),
            "skew": skew(real_ret),
            "kurtosis_per_series_median": held_out_kurtosis(real_ret),
        },
        "real_train": stylised_facts(real_ret, ts.raw[..., ret_col]),
    }
    samples = {}
    for name, model in tqdm(models.items(), desc="report", disable=not progress):
        samples[name] = model.sample_features(paths, length, None, seed)
        report[name] = {
            **judge_scores(model, ts, held, gen.seq_len, runs, iters, seed),
            **stylised_facts(real_ret, samples[name][..., ret_col]),
            "kurtosis_per_path_median": float(
                np.median(per_row_kurtosis(samples[name][..., ret_col]))
            ),
            "at_held_out_length": like_for_like(model, real_ret, ret_col, seed),
            "drift": drift(
                model.sample_features(DRIFT_PATHS, DRIFT_BARS, None, seed + 4), train_std
            ),
            "train_seconds": fit_seconds[name],
            "sample_seconds": timed_sample(model, ts.names, gen.start, seed),
        }
    if "train_cpu_seconds" in gen.extra:
        report["model"]["train_cpu_seconds"] = float(gen.extra["train_cpu_seconds"])
    report["predictive_score_real"] = predictive_score(
        overlapping(ts.scaled, gen.seq_len),
        overlapping(ts.scaler.apply(held), gen.seq_len),
        ret_col,
        iters,
        seed,
    )
    if gen.regimes is not None:
        # per regime: the classifier goal, and vol and skew of
        # generated and real bars (recognise.py)
        # each regime's paths start where that regime's training bars are, so their
        # vol and skew compare with them
        report["regimes"] = regime_report(
            gen, ts, real_ret, min(paths, 200), length, seed, data.periods_per_year, start="regime"
        )
        report["regimes_network_alone"] = regime_report(
            gen,
            ts,
            real_ret,
            min(paths, 200),
            length,
            seed,
            data.periods_per_year,
            proposals=1,
            start="regime",
        )
    if plot_dir is not None:
        # matplotlib only when plots are asked for
        from clstm_ppo.scenarios.plots import write_plots

        write_plots(
            Path(plot_dir),
            real_ret,
            {k: v[..., ret_col] for k, v in samples.items()},
            data.bars["close"][:, data.splits["train"][1] - 1 :],
            gen,
            length,
            seed,
        )
    report["verdict"] = verdict(report, MODEL_KEYS)
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as a table a terminal shows."""
    emd_lags = list(report["model"]["emd"])
    head = (
        f"{'':<10} {'disc':>6} {'strict':>7} {'pred':>7} "
        + " ".join(f"{'emd' + lag:>8}" for lag in emd_lags)
        + f" {'acf r':>7} {'acf |r|':>7} {'acf r2':>7} {'lever':>7} {'kurt':>6} {'skew':>6}"
    )
    lines = [
        f"{report['generator']} after {report['steps']} steps; windows of {report['seq_len']} "
        f"bars; {report['paths']} paths x {report['length']} bars; judge: {report['judge_runs']} "
        f"runs x {report['judge_iters']} iterations",
        head,
    ]
    for name in (*MODEL_KEYS, "real_train"):
        row = report[name]
        judged = (
            f"{row['discriminative_score']:>6.3f} {row['discriminative_score_strict']:>7.3f} "
            f"{row['predictive_score']:>7.4f}"
            if "discriminative_score" in row
            else f"{'':>6} {'':>7} {'':>7}"
        )
        lines.append(
            f"{name:<10} {judged} "
            + " ".join(f"{row['emd'][lag]:>8.5f}" for lag in emd_lags)
            + f" {row['acf_score']['r']:>7.3f} {row['acf_score']['abs']:>7.3f} "
            f"{row['acf_score']['sq']:>7.3f} {row['leverage_score']:>7.3f} "
            f"{row['kurtosis']:>6.2f} {row['skew']:>6.2f}"
        )
    real = report["real_held_out"]
    lines.append(
        f"real held-out bars: kurtosis {real['kurtosis']:.2f}, skew {real['skew']:.2f}; predictive "
        f"score of a judge trained on real training windows: {report['predictive_score_real']:.4f}"
    )
    lines.append(
        "disc: |accuracy - 0.5| (0 is best); strict: non-overlapping windows, judged after the "
        "training split's end; real_train: the training bars' own returns against the held-out "
        "ones; kurt: every path's returns pooled (the tail goal reads paths as long as the "
        "held-out series, each on its own)"
    )
    if "regimes" in report:
        lines.extend(format_regimes(report["regimes"]))
        alone = report["regimes_network_alone"]
        vol = alone["vol"]
        lines.append(
            f"the cGAN's network alone (one proposal a bar, sampling.py): generated accuracy "
            f"{alone['classifier_accuracy_generated']:.1%}, gap {alone['gap_points']:+.1f} points; "
            f"vol bull {vol['bull']['generated']:.1%}, crash {vol['crash']['generated']:.1%}"
        )
    lines.extend(format_verdict(report["verdict"], {"model": f"model ({report['generator']})"}))
    return "\n".join(lines)
