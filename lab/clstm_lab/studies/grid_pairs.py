"""Two grids paired run by run (scripts/studies/compare_grids.py): for each configuration both have and each headline
metric, A's and B's mean +- std over the shared runs and B - A with its bootstrap 95% interval over runs and the
fold-clustered one (statistics.clustered_bootstrap_ci); with the runs' folders, what each run learnt where it
trained and validated (docs/RESULTS.md, "Method")."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from clstm_lab.studies.across_runs import run_folder
from clstm_ppo.backtest.statistics import paired_difference

METRICS = ("sharpe_excess", "total_return", "max_drawdown", "ruined")  # the headline and what it costs
LEARNING = ("train_return_end", "val_sharpe_last")  # read from each run's metrics.jsonl with --runs
KEY = ("config", "window", "seed", "fold")  # what makes two runs twins
LAST_SHARE = 0.1  # train_return_end: the training episodes that ended in this last share of a run's env steps


def with_learning(runs: list[dict[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """``runs`` with ``LEARNING``'s numbers from each run's metrics.jsonl under ``folder`` (reproduce_paper's
    layout: fold<k>/<config>-tw<window>-seed<seed>)."""
    out = []
    for run in runs:
        path = run_folder(folder, run) / "metrics.jsonl"
        if not path.is_file():
            raise SystemExit(f"error: {path} not found: --runs takes the folder reproduce_paper.py wrote this grid's "
                             "runs to (its --out, then the data's name)")
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        train = [r for r in records if r["kind"] == "train_episodes"]
        evals = [r for r in records if r["kind"] == "eval"]
        end = max((r["step"] for r in train), default=0)
        last = [r for r in train if r["step"] >= (1.0 - LAST_SHARE) * end]
        episodes = sum(r["episodes"] for r in last)
        out.append({**run, "train_return_end": sum(r["return_pct"] * r["episodes"] for r in last) / episodes
                    if episodes else math.nan, "val_sharpe_last": evals[-1]["sharpe"] if evals else math.nan})
    return out


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]],
            by: tuple[str, ...] = ("config",)) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """One row per group (``by``: the configuration, or with "fold" each configuration's folds apart) and metric
    over the runs both grids have, and how many runs were left out."""
    by_key_a = {tuple(r[k] for k in KEY): r for r in a}
    by_key_b = {tuple(r[k] for k in KEY): r for r in b}
    shared = [k for k in by_key_a if k in by_key_b]
    if not shared:
        raise SystemExit("error: the two grids share no run (configuration, window, seed and fold): compare grids "
                         "of the same data, folds and seeds")
    group = lambda key: tuple(key[KEY.index(name)] for name in by)  # noqa: E731
    rows = []
    for values in dict.fromkeys(group(k) for k in shared):
        keys = [k for k in shared if group(k) == values]
        for metric in [m for m in (*METRICS, *LEARNING) if m in by_key_a[keys[0]] and m in by_key_b[keys[0]]]:
            x = np.array([_number(by_key_a[k][metric]) for k in keys])
            y = np.array([_number(by_key_b[k][metric]) for k in keys])
            d = paired_difference(y, x, groups=np.array([k[KEY.index("fold")] for k in keys]))
            rows.append({**dict(zip(by, values, strict=True)), "metric": metric, "runs": len(keys),
                         "a_mean": _mean(x), "a_std": _std(x), "b_mean": _mean(y), "b_std": _std(y),
                         "b_minus_a": d["mean"], "ci_low": d["ci_low"], "ci_high": d["ci_high"],
                         "fold_ci_low": d["fold_ci_low"], "fold_ci_high": d["fold_ci_high"], "b_higher": d["wins"]})
    left_out = {"only_a": len(by_key_a) - len(shared), "only_b": len(by_key_b) - len(shared)}
    return rows, left_out


def renamed(runs: list[dict[str, Any]], config: str, as_config: str) -> list[dict[str, Any]]:
    """The runs of ``config`` alone, called ``as_config``: so that two grids' runs of different labels pair."""
    return [{**r, "config": as_config} for r in runs if r["config"] == config]


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)  # null in the JSON: a number that does not exist


def _mean(x: np.ndarray) -> float:
    finite = x[np.isfinite(x)]
    return float(finite.mean()) if finite.size else math.nan


def _std(x: np.ndarray) -> float:
    finite = x[np.isfinite(x)]
    return float(finite.std(ddof=1)) if finite.size > 1 else math.nan
