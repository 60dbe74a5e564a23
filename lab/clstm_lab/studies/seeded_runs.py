"""Seeded studies built from the public commands (scripts/studies/precision_equivalence.py,
scripts/studies/augment_study.py, scripts/studies/tune_vs_default.py, scripts/studies/reproduce_paper.py): train a run
to its budget, resumably, read its best checkpoint's walk over the test split, and the statistics over seeds
(x folds) that separate skill from luck (docs/RESULTS.md, "Method")."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from clstm_lab.studies.across_runs import mean_over_underlyings
from clstm_ppo.backtest.checkpoints import backtest_checkpoints
from clstm_ppo.backtest.statistics import paired_difference
from clstm_ppo.config import ConfigError
from clstm_ppo.run_files.checkpoint import CheckpointError
from clstm_ppo.run_files.run_state import load_checkpoint
from clstm_ppo.tables import strict_json
from clstm_ppo.training.launch import WorkersFailed, train_run


def run_finished(run: Path, steps: int) -> bool:
    """The run spent its budget: latest.pt holds at least ``steps`` env steps and a best composite exists."""
    latest = run / "latest.pt"
    if not (latest.exists() and (run / "best_composite.pt").exists()):
        return False
    return load_checkpoint(latest).global_step >= steps


def train_to_budget(config: str, data: str, seed: int, steps: int, folder: Path, name: str, sets: list[str],
                    num_gpus: int = 1) -> None:
    """Train ``folder/name`` to ``steps`` env steps with ``KEY=VALUE`` ``sets``: fresh, or continued from
    latest.pt where an earlier launch was stopped; nothing when it is done already."""
    run = folder / name
    if run_finished(run, steps):
        return
    resume = (run / "latest.pt").exists()
    try:
        train_run(config, sets, settings={"data.source": data, "seed": seed, "train.total_steps": steps,
                                          "output.checkpoint_dir": str(folder), "output.run_name": name},
                  resume_from="latest" if resume else None, fresh_start=not resume, num_gpus=num_gpus)
    except (ConfigError, WorkersFailed) as err:
        raise SystemExit(f"error: training {name} failed: {err}") from None
    # a run stopped by SIGTERM or Ctrl-C returns normally at an update boundary: its checkpoints are not the
    # budget's, so walking them would record a shorter run as this cell (a grid queues the cell again instead)
    if not run_finished(run, steps):
        raise SystemExit(f"error: training {name} stopped before its budget of {steps:,} env steps; run the same "
                         "command again to continue it from latest.pt")


def test_split_metrics(run: Path) -> dict[str, float]:
    """The agent's test-split walk of best_composite.pt, averaged over the underlyings (one copy each)."""
    best, report = run / "best_composite.pt", run / "test_report.json"
    # A report older than the checkpoint belongs to an earlier best: walk again.
    if not report.exists() or report.stat().st_mtime < best.stat().st_mtime:
        try:
            done = backtest_checkpoints([str(best)], split="test")
        except (ConfigError, CheckpointError) as err:
            raise SystemExit(f"error: evaluating {run.name}: {err}") from None
        report.write_text(strict_json(done.report, indent=2, default=str))
    agent = mean_over_underlyings(json.loads(report.read_text())["policies"]["agent"])
    return {"test_sharpe": agent["sharpe"], "test_total_return": agent["total_return"]}


def train_minutes(run: Path) -> float:
    """Wall minutes of training, summed over launches (each launch's metrics.jsonl clock starts at 0)."""
    path, total, last = run / "metrics.jsonl", 0.0, 0.0
    if not path.exists():
        return math.nan
    for line in path.read_text().splitlines():
        t = json.loads(line).get("time", 0.0)
        if t < last:
            total += last
        last = t
    return (total + last) / 60


def run_record(run: Path) -> dict[str, float]:
    """A finished run's numbers: the trainer's own best validation composite (what tuning scores), the update
    that set it, the test walk of best_composite.pt, and the training minutes."""
    # latest.pt's selection state holds the run's final best composite; best_composite.pt says when it was set.
    best = load_checkpoint(run / "latest.pt").best["composite"]
    best_update = load_checkpoint(run / "best_composite.pt").update
    return {"val_composite": float(best), "best_update": int(best_update), **test_split_metrics(run),
            "train_min": train_minutes(run)}


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; nan for one value)."""
    a = np.asarray(values, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else math.nan


def arm_rows(records: list[dict[str, Any]], arm_key: str, arms: list[str], metrics: list[str]) -> list[dict]:
    """One row per arm: its seeds, and per metric the mean, the std over seeds and each seed's value."""
    rows = []
    for arm in arms:
        mine = [r for r in records if r[arm_key] == arm]
        row: dict[str, Any] = {arm_key: arm, "seeds": len(mine)}
        for key in metrics:
            row[key], row[f"{key}_std"] = mean_std([r[key] for r in mine])
            row[f"{key}_per_seed"] = [r[key] for r in mine]
        rows.append(row)
    return rows


def paired_differences(records: list[dict[str, Any]], arm_key: str, base: str, other: str,
                       metrics: list[str]) -> dict[str, Any]:
    """``other`` - ``base`` seed by seed (the seeds both arms ran): per metric the differences, their mean and a
    percentile bootstrap 95% CI over seeds (nan below two seeds)."""
    by = {(r[arm_key], r["seed"]): r for r in records}
    seeds = sorted(s for (arm, s) in by if arm == base and (other, s) in by)
    out: dict[str, Any] = {"paired_seeds": seeds}
    for key in metrics:
        a, b = (np.array([by[(arm, s)][key] for s in seeds], dtype=float) for arm in (other, base))
        d = paired_difference(a, b)
        out[key] = {"diffs": (a - b).tolist(), "mean_diff": d["mean"], "ci95": [d["ci_low"], d["ci_high"]],
                    f"{base}_mean": float(b.mean()) if seeds else math.nan,
                    f"{other}_mean": float(a.mean()) if seeds else math.nan}
    return out


def seeded_arm_run(config: str | None, data: str, out: Path, steps: int, threads: int | None, arm_key: str, arm: str,
                   seed: int, sets: list[str]) -> dict[str, Any]:
    """One arm's seeded run of a two-arm study trained to its budget (resumably) under ``out``/<data>/<arm>-seed<k>,
    then its record: ``{arm_key: arm, "seed": seed, **run_record(...)}``."""
    folder = out / Path(data).name.split(".")[0]
    name = f"{arm}-seed{seed}"
    if threads:
        sets = [*sets, f"launch.threads_per_worker={threads}"]
    train_to_budget(config, data, seed, steps, folder, name, sets)
    return {arm_key: arm, "seed": seed, **run_record(folder / name)}
