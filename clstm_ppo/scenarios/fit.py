"""Fit a generator on the training split alone: the volatility filter and its coded residuals,
regime labels, windows, the loop, resumable checkpoints."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clstm_ppo.config import ConfigError
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.run_files.checkpoint import CheckpointError
from clstm_ppo.run_files.tracking import Tracker
from clstm_ppo.scenarios.bar_columns import (
    Scaler,
    bar_features,
    feature_names,
    split_bars,
    start_state,
)
from clstm_ppo.scenarios.coding import Transform
from clstm_ppo.scenarios.generator import (
    DEFAULT_STEPS,
    FittedGenerator,
    build_model,
    check_model,
    load_generator,
)
from clstm_ppo.scenarios.regime_labels import REGIMES, RegimeRule
from clstm_ppo.scenarios.sampling import calibrate, transitions


@dataclass
class FitOptions:
    steps: int | None = None  # None: DEFAULT_STEPS[model] (or the resumed run's own budget)
    seq_len: int = 24  # TimeGAN's window on daily stock data
    batch_size: int = 64
    seed: int = 0
    save_every: int = 0  # steps between checkpoints; 0: a tenth of the budget
    # the model's settings (hidden, lr, ...) over defaults
    settings: dict[str, Any] = field(default_factory=dict)
    regime_window: int = 20
    use_wandb: bool = False
    tensorboard: str = ""
    progress: bool = True


@dataclass
class TrainingSet:
    """Training-split columns, standardised (what the report's judges read), a regime label
    per bar, and the volatility filter with the coded residuals and states the models learn
    from (coding.py)."""

    names: tuple[str, ...]
    scaled: np.ndarray  # (S, T, F) float32
    raw: np.ndarray  # (S, T, F) float64
    scaler: Scaler
    labels: np.ndarray  # (S, T) int64 regime index
    rule: RegimeRule
    transform: Transform | None = None  # fit_generator's: the report's judges need none

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        assert self.transform is not None
        return self.transform.training_rows()


def training_set(
    data: MarketData, regime_window: int = 20, with_transform: bool = False
) -> TrainingSet:
    """Everything is computed from the training split's bars: a later bar never reaches the scaler,
    the filter, the coding, the regime thresholds or a window."""
    names = feature_names(data)
    raw = bar_features(split_bars(data, "train"), names)
    scaler = Scaler.fit(raw)
    ret = raw[..., names.index("ret")]
    rule = RegimeRule.fit(ret, regime_window)
    transform = Transform.fit(raw, names, regime_window) if with_transform else None
    return TrainingSet(names, scaler.apply(raw), raw, scaler, rule.label(ret), rule, transform)


def data_identity(data: MarketData) -> dict[str, Any]:
    first, last = data.split_dates("train")
    return {
        "symbols": list(data.symbols),
        "train_first": str(first.date()),
        "train_last": str(last.date()),
        "test_last": str(data.dates[-1].date()),
    }


class WindowSampler:
    """Random windows of ``seq_len`` bars from any underlying (from the first bar with a whole
    state on), from a seeded numpy generator that a resume restores: coded residuals, states
    and regime labels."""

    def __init__(
        self, ts: TrainingSet, seq_len: int, batch_size: int, seed: int, device: torch.device
    ):
        self.coded, self.cond = ts.rows()
        n_sym, n_bars, _ = self.coded.shape
        first = ts.transform.window
        if n_bars - first < seq_len:
            raise ConfigError(
                f"the training split has {n_bars} bars, fewer than the window of {seq_len} after "
                f"the {first} bars a state needs; lower --seq-len or give more training data"
            )
        starts = np.arange(first, n_bars - seq_len + 1)
        self.index = np.stack(
            np.meshgrid(np.arange(n_sym), starts, indexing="ij"), axis=-1
        ).reshape(-1, 2)
        self.ts, self.seq_len, self.batch_size, self.device = ts, seq_len, batch_size, device
        self.rng = np.random.default_rng(seed)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pick = self.index[self.rng.integers(len(self.index), size=self.batch_size)]
        rows = pick[:, 1:2] + np.arange(self.seq_len)
        parts = (
            self.coded[pick[:, :1], rows],
            self.cond[pick[:, :1], rows],
            self.ts.labels[pick[:, :1], rows],
        )
        return tuple(torch.from_numpy(np.ascontiguousarray(p)).to(self.device) for p in parts)


def _fresh(
    data: MarketData, kind: str, ts: TrainingSet, opts: FitOptions, device: torch.device
) -> FittedGenerator:
    torch.manual_seed(opts.seed)
    model = build_model(kind, len(ts.names), ts.transform.n_cond, opts.settings, device)
    counts = np.bincount(ts.labels.reshape(-1), minlength=len(REGIMES))
    return FittedGenerator(
        kind=kind,
        model=model,
        feature_names=ts.names,
        transform=ts.transform,
        seq_len=opts.seq_len,
        start=start_state(data),
        data=data_identity(data),
        regimes=ts.rule if kind == "cgan" else None,
        total_steps=opts.steps or DEFAULT_STEPS[kind],
        extra={
            "batch_size": opts.batch_size,
            "seed": opts.seed,
            "label_freq": (counts / counts.sum()).tolist(),
            "transitions": transitions(ts.labels, len(REGIMES)).tolist(),
            "train_seconds": 0.0,
            "train_cpu_seconds": 0.0,
        },
    )


def _resumed(
    out: Path, data: MarketData, kind: str, ts: TrainingSet, opts: FitOptions, device: torch.device
) -> FittedGenerator:
    gen = load_generator(out, device)
    same_data = all(gen.data.get(k) == v for k, v in data_identity(data).items())
    if gen.kind != kind or gen.feature_names != ts.names or not same_data:
        raise CheckpointError(
            f"{out} holds a {gen.kind} fitted on {gen.data['symbols']} with columns "
            f"{', '.join(gen.feature_names)}; resume it with the same --model and --data, "
            "or train into another --out"
        )
    gen.total_steps = opts.steps or gen.total_steps
    return gen


def fit_generator(
    data: MarketData,
    kind: str,
    out: Path,
    opts: FitOptions,
    device: torch.device,
    resume: bool = False,
    data_config: dict[str, Any] | None = None,
) -> FittedGenerator:
    """Train ``kind`` on ``data``'s training split into ``out`` (atomic checkpoints
    every save_every steps).

    ``data_config`` (the data section as a dict) is kept in the checkpoint so the report
    rebuilds the same bars.
    """
    check_model(kind)
    started, cpu_started = time.perf_counter(), time.process_time()
    ts = training_set(data, opts.regime_window, with_transform=True)
    if out.exists() and not resume:
        raise CheckpointError(f"{out} exists; pass --resume to continue it or choose another --out")
    gen = (
        _resumed(out, data, kind, ts, opts, device)
        if resume and out.exists()
        else _fresh(data, kind, ts, opts, device)
    )
    sampler = WindowSampler(
        ts, gen.seq_len, int(gen.extra["batch_size"]), int(gen.extra["seed"]), device
    )
    if "numpy_rng" in gen.extra:  # a resume continues both random streams where they stopped
        sampler.rng.bit_generator.state = gen.extra["numpy_rng"]
        torch.set_rng_state(torch.as_tensor(gen.extra["torch_rng"], dtype=torch.uint8))
    gen.model.total_steps = gen.total_steps
    if data_config is not None:
        gen.data["config"] = data_config
    save_every = opts.save_every or max(gen.total_steps // 10, 1)
    log_dir = out.parent / f"{out.stem}_logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    tracker = Tracker(
        log_dir,
        gen.total_steps,
        {"model": kind, **gen.state()["settings"]},
        opts.use_wandb,
        "clstm_ppo-scenarios",
        out.stem,
        gen.step,
        opts.tensorboard,
        progress=opts.progress,
    )
    try:
        while gen.step < gen.total_steps:
            batches = [sampler.batch() for _ in range(gen.model.batches_per_step(gen.step))]
            losses = gen.model.step(batches, gen.step)
            gen.step += 1
            tracker.progress(1, {k: f"{v:.3g}" for k, v in losses.items() if k != "phase"})
            if gen.step % 10 == 0 or gen.step == gen.total_steps:
                tracker.log(kind, gen.step, losses)
            if gen.step % save_every == 0 or gen.step == gen.total_steps:
                # the budget goal is the whole fit (the filter included), summed over resumes
                now, cpu_now = time.perf_counter(), time.process_time()
                gen.extra["train_seconds"] = gen.extra.get("train_seconds", 0.0) + now - started
                gen.extra["train_cpu_seconds"] = (
                    gen.extra.get("train_cpu_seconds", 0.0) + cpu_now - cpu_started
                )
                started, cpu_started = now, cpu_now
                # sampling only: training never reads it
                gen.calibration = calibrate(gen, ts.labels)
                gen.extra["numpy_rng"] = sampler.rng.bit_generator.state
                gen.extra["torch_rng"] = torch.get_rng_state().tolist()
                gen.save(out)
    finally:
        tracker.close()
    return gen
