"""The paper's grid (scripts/studies/reproduce_paper.py): each cell trained and its validation picks walked on its
fold's test years, then every table of the report and the grid's CSV rows from the cells' results (docs/RESULTS.md,
"Method")."""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clstm_lab.studies.across_runs import (
    METRICS,
    deflated_best,
    fingerprint,
    mean_over_underlyings,
    paired_rows,
    run_name,
    summary_rows,
)
from clstm_lab.studies.seeded_runs import train_to_budget
from clstm_ppo.backtest.calibration import fold_overrides
from clstm_ppo.backtest.checkpoints import backtest_checkpoints
from clstm_ppo.backtest.report import write_returns_csv
from clstm_ppo.config import ConfigError
from clstm_ppo.data.folds import Fold
from clstm_ppo.run_files.checkpoint import CheckpointError
from clstm_ppo.tables import strict_json

KINDS = ("clstm", "lstm", "mlp")
REWARDS = ("equity", "excess", "dsr")  # --rewards' choices; the paper's comparison: equity and excess
WINDOWS = (5, 15, 30, 50)
BENCHMARKS = ("buy_and_hold", "macd_rule", "best_rule", "putwrite", "best_conditional_rule")
PICKS = {"agent": "best_composite.pt", "smoothed": "best_composite_smoothed.pt"}


def label(kind: str, reward: str) -> str:
    return kind if reward == "equity" else f"{kind}+{reward}"


def cell_settings(cell: dict[str, Any], fits: dict[str, dict[str, Any]]) -> list[str]:
    """The cell's --set values: its kind, reward and window, and its fold's dates and refitted market."""
    sets = [f"agent.kind={cell['kind']}", f"env.reward={cell['reward']}", f"data.window={cell['window']}"]
    if cell["fold"] is not None:
        fold, fit = Fold(**fits[str(cell["fold"])]["fold"]), fits[str(cell["fold"])]
        sets += fold_overrides(fold, fit)
    return sets


def cell_overrides(overrides: list[str], cell: dict[str, Any]) -> list[str]:
    """The grid's --set values for one cell: ``{fold}`` becomes the cell's fold (``split`` without folds), so a
    setting that must differ by fold names it once, e.g. a generator fitted on each fold's own training years:
    ``--set data.augment_checkpoint=gens/fold{fold}/wgan_gp.pt`` (python -m clstm_ppo.scenarios train --folds N
    --fold K --out gens/foldK)."""
    fold = "split" if cell["fold"] is None else str(cell["fold"])
    return [o.replace("{fold}", fold) for o in overrides]


def data_label(data: str) -> str:
    return Path(data).name.split(".")[0]


def train_and_backtest(cell: dict[str, Any], fits: dict, *, config: str | None, data: str, steps: int, out: Path,
                       overrides: list[str], num_gpus: int = 1) -> dict[str, Any]:
    """One cell trained (under ``out``/<data>/<fold>/<run>), its two validation picks walked on the fold's test
    years: policy -> metrics (the mean over underlyings), and each pick's daily returns over cash (mean over
    underlyings)."""
    name = run_name(label(cell["kind"], cell["reward"]), cell["window"], cell["seed"])
    folder = out / data_label(data) / ("split" if cell["fold"] is None else f"fold{cell['fold']}")
    run = folder / name
    train_to_budget(config, data, cell["seed"], steps, folder, name,
                    [*cell_overrides(overrides, cell), *cell_settings(cell, fits)],
                    num_gpus=num_gpus)
    picks = {pick: run / file for pick, file in PICKS.items() if (run / file).exists()}
    report, returns = run / "test_report.json", run / "test_returns.csv"
    try:
        done = backtest_checkpoints([str(path) for path in picks.values()], split="test")
    except (ConfigError, CheckpointError) as err:
        raise SystemExit(f"error: evaluating {name}: {err}") from None
    report.write_text(strict_json(done.report, indent=2, default=str))
    write_returns_csv(done.results, returns)
    policies = done.report["policies"]
    daily = pd.read_csv(returns, index_col="date")
    names = ["agent"] if len(picks) == 1 else [f"agent_{i + 1}" for i in range(len(picks))]
    out: dict[str, Any] = {b: mean_over_underlyings(policies[b]) for b in BENCHMARKS}
    # a policy's column per underlying ("agent_1:AAPL") or one column ("agent"): its mean day by day
    mean_of = lambda policy: daily.filter(regex=f"^{policy}(:|$)").mean(axis=1)  # noqa: E731
    for pick, column in zip(picks, names, strict=True):
        out[pick] = mean_over_underlyings(policies[column])
        out[f"{pick}_returns"] = (mean_of(column) - mean_of("cash")).tolist()  # over cash: the rate, day by day
    out.setdefault("smoothed", None)  # too few validation walks for a smoothed pick
    return out


def grid_rows(cells: list[dict[str, Any]], results: list[dict[str, Any]], tables: dict[str, Any],
              default_window: int) -> list[dict[str, Any]]:
    """The grid's CSV rows: every run (``per_run``), then each benchmark's walk of the same fold under each seed of
    the first configuration at the default window, so that a benchmark pairs with a run by seed and fold."""
    first = label(cells[0]["kind"], cells[0]["reward"])
    benchmarks = [{"config": bench, "window": c["window"], "seed": c["seed"], "fold": "split" if c["fold"] is None
                   else c["fold"], **{k: r[bench][k] for k in METRICS}}
                  for bench in BENCHMARKS for c, r in zip(cells, results, strict=True)
                  if c["window"] == default_window and label(c["kind"], c["reward"]) == first]
    return [*tables["per_run"], *benchmarks]


def gather(cells: list[dict[str, Any]], results: list[dict[str, Any]], kinds: list[str], rewards: list[str],
           default_window: int, folds: list[Any], periods_per_year: float) -> dict[str, Any]:
    """Every table of the report from the cells' results; ``periods_per_year``: the data's bars a year."""
    at_default = [(c, r) for c, r in zip(cells, results, strict=True) if c["window"] == default_window]
    labels = [label(k, w) for w in rewards for k in kinds]
    by_label = {lab: [(c, r) for c, r in at_default if label(c["kind"], c["reward"]) == lab] for lab in labels}
    main_runs = {lab: [r["agent"] for _, r in pairs] for lab, pairs in by_label.items()}
    first = by_label[labels[0]]
    main_runs |= {bench: [r[bench] for _, r in first] for bench in BENCHMARKS}  # deterministic: one walk a fold
    smoothed = {f"{lab} [smoothed]": [r["smoothed"] or _missing() for _, r in pairs] for lab, pairs in by_label.items()
                if any(r["smoothed"] for _, r in pairs)}  # none where no run had enough validation walks
    pairs = [(label(a, w), label(b, w)) for w in rewards for i, a in enumerate(kinds) for b in kinds[i + 1:]]
    pairs += [(label(k, w), label(k, "equity")) for w in rewards if w != "equity" and "equity" in rewards
              for k in kinds]
    pairs += [(lab, bench) for bench in ("buy_and_hold", "best_rule", "putwrite", "best_conditional_rule")
              for lab in labels]
    pairs += [(f"{lab} [smoothed]", lab) for lab in labels if f"{lab} [smoothed]" in smoothed]
    per_fold = []
    for fold in folds:
        row: dict[str, Any] = {"fold": "split" if fold is None else fold}
        for lab, runs in main_runs.items():
            mine = [m for (c, _), m in zip(first if lab in BENCHMARKS else by_label[lab], runs, strict=True)
                    if c["fold"] == fold]
            row[lab] = float(np.nanmean([m["sharpe_excess"] for m in mine]))
        per_fold.append(row)
    daily = {lab: _ensemble_returns(pairs_, folds) for lab, pairs_ in by_label.items()}
    # Seeds that learn one greedy rule walk identically (docs/RESULTS.md): fewer independent draws than runs.
    walks = []
    for lab, pairs_ in by_label.items():
        for fold in folds:
            groups = Counter(fingerprint(r["agent_returns"], 12) for c, r in pairs_ if c["fold"] == fold)
            walks.append({"config": lab, "fold": "split" if fold is None else fold, "runs": sum(groups.values()),
                          "distinct_walks": len(groups), "largest_group": max(groups.values())})
    ablation: dict[str, list[dict[str, float]]] = {}
    for c, r in zip(cells, results, strict=True):
        if c["kind"] == "clstm" and c["reward"] == "equity":
            ablation.setdefault(f"clstm TW {c['window']}", []).append(r["agent"])
    ablation = dict(sorted(ablation.items(), key=lambda kv: int(kv[0].split()[-1]))) if len(ablation) > 1 else {}
    # each window against the default one and against owning the index, run by run (the same seed and fold)
    ablation_pairs = [(lab, f"clstm TW {default_window}") for lab in ablation if lab != f"clstm TW {default_window}"]
    ablation_pairs += [(lab, "buy_and_hold") for lab in ablation]
    per_run = [{"config": label(c["kind"], c["reward"]), "window": c["window"], "seed": c["seed"],
                "fold": "split" if c["fold"] is None else c["fold"], **{k: r["agent"][k] for k in METRICS},
                "smoothed_sharpe_excess": (r["smoothed"] or _missing())["sharpe_excess"]}
               for c, r in zip(cells, results, strict=True)]
    return {"main": summary_rows(main_runs | smoothed), "paired": paired_rows(main_runs | smoothed, pairs),
            "per_fold": per_fold, "walks": walks, "deflated": deflated_best(daily, periods_per_year),
            "ablation": summary_rows(ablation),
            "ablation_paired": paired_rows(ablation | {"buy_and_hold": main_runs["buy_and_hold"]}, ablation_pairs),
            "per_run": per_run}


def _missing() -> dict[str, float]:
    return dict.fromkeys(METRICS, math.nan)


def _ensemble_returns(pairs: list[tuple[dict, dict]], folds: list[Any]) -> np.ndarray:
    """A configuration's daily test returns: each day the mean over its seeds, the folds end to end."""
    parts = []
    for fold in folds:
        runs = [r["agent_returns"] for c, r in pairs if c["fold"] == fold]
        parts.append(np.mean(np.array(runs, dtype=float), axis=0))
    return np.concatenate(parts)
