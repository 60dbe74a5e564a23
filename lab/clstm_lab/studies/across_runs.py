"""Many runs' test walks summarised: mean +- std and a bootstrap 95% interval over seeds x
folds, paired differences over the same (seed, fold), and the deflated Sharpe ratio of the best configuration
given how many were tried. A run is one dict of metrics (``METRICS``); a missing number is NaN here and null in
every JSON written from it."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clstm_ppo.backtest.statistics import bootstrap_ci, deflated_sharpe, paired_difference

# ruined: 1 where the walk's equity fell below env.ruin_fraction of the initial cash at some close (its mean over
# runs is the share of accounts lost: a Sharpe averaged over runs hides a ruin); min_equity: that lowest close.
# costs: every fee, spread and slippage paid over the walk, in dollars (what a policy's trading gave away).
METRICS = ("total_return", "annual_return", "sharpe_excess", "sharpe", "max_drawdown", "min_equity", "ruined",
           "profit_per_trade", "trades", "costs")
# Bootstrap intervals and paired differences. The headline Sharpe is over the T-bill (sharpe_excess): the rf-0
# Sharpe ("sharpe", as the paper quotes it) of a policy that sits in cash is its interest over almost no
# volatility, tens, which one such run lets dominate a mean.
CI_METRICS = ("sharpe_excess", "total_return")
Runs = dict[str, list[dict[str, float]]]  # label -> one metrics dict per (seed, fold), in one shared order


def run_name(config: str, window: int, seed: int) -> str:
    """A grid run's folder name: reproduce_paper.py trains it in <--out>/<data>/<fold<k> or split>/<this>."""
    return f"{config}-tw{window}-seed{seed}"


def run_folder(runs: Path, run: dict[str, Any]) -> Path:
    """The folder of one per-run row of a grid's JSON, under ``runs`` (reproduce_paper's --out / the data's name)."""
    fold = "split" if run["fold"] in (None, "split") else f"fold{run['fold']}"
    return runs / fold / run_name(run["config"], run["window"], run["seed"])


GRID_META = ("grid", "commit", "date", "machine", "command")  # what every row of a grid's CSV says of its grid
KEY_COLUMNS = ("config", "window", "seed", "fold")  # one run: its configuration (or a benchmark), window, seed, fold


def read_grid(path: Path) -> list[dict[str, Any]]:
    """The per-run rows of a grid: a CSV that ``reproduce_paper.py`` wrote (docs/data/grids/<name>.csv: the runs
    and, under each benchmark's name as their config, the benchmarks walked on the same folds), or what its
    ``--json`` printed (its log will do: the file's last non-empty line); a clear SystemExit for anything else."""
    if not path.is_file():
        raise SystemExit(f"error: {path} not found: give a grid's CSV (docs/data/grids/) or the file "
                         "reproduce_paper.py --json printed to")
    if path.suffix == ".csv":
        return read_grid_csv(path)
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    try:
        grid = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        grid = None
    if not isinstance(grid, dict) or not isinstance(grid.get("per_run"), list):
        raise SystemExit(f"error: {path}'s last line is not reproduce_paper.py's --json output (no per_run list): "
                         "run it with --json and keep its output")
    return grid["per_run"]


def read_grid_csv(path: Path) -> list[dict[str, Any]]:
    """A grid CSV's rows: the key columns as ints (a fold may be the default split's name), every metric as a
    float (NaN where the grid has no number), the grid's description as text."""
    frame = pd.read_csv(path, keep_default_na=True)
    missing = [c for c in KEY_COLUMNS if c not in frame]
    if missing:
        raise SystemExit(f"error: {path} lacks the column(s) {', '.join(missing)}: give a CSV reproduce_paper.py "
                         "wrote (docs/data/grids/)")
    rows = []
    for record in frame.to_dict("records"):
        row = {}
        for key, value in record.items():
            if key in ("config", *GRID_META):
                row[key] = "" if isinstance(value, float) and math.isnan(value) else str(value)
            elif key in KEY_COLUMNS:
                row[key] = int(value) if str(value).lstrip("-").isdigit() else value
            else:
                row[key] = float(value)
        rows.append(row)
    return rows


def write_grid_csv(path: Path, rows: list[dict[str, Any]], meta: dict[str, str]) -> None:
    """The grid's rows, each with ``meta`` (``GRID_META``: its name, commit, date, machine and command), as a CSV."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([{**{k: meta[k] for k in ("grid",)}, **row} for row in rows])
    for key in GRID_META[1:]:
        frame[key] = meta[key]
    frame.to_csv(path, index=False, float_format="%.10g")


def mean_over_underlyings(by_symbol: dict[str, dict[str, Any]]) -> dict[str, float]:
    """One policy's metrics in evaluate's JSON averaged over the underlyings walked (one copy each). Profit per
    trade is the closed options' own P&L per trade, every cost in (null without trades)."""
    rows = [{k: math.nan if m.get(k) is None else float(m[k]) for k in METRICS} for m in by_symbol.values()]
    return {k: float(np.nanmean([r[k] for r in rows])) if any(np.isfinite(r[k]) for r in rows) else math.nan
            for k in METRICS}


def fingerprint(values: np.ndarray, decimals: int) -> str:
    """Eight hex digits that two walks share only when their series agree to ``decimals`` places."""
    return hashlib.sha256(np.round(np.asarray(values, dtype=np.float64), decimals).tobytes()).hexdigest()[:8]


def summary_rows(runs: Runs) -> list[dict[str, Any]]:
    """One row per label: mean +- std (ddof 1) of every metric over its runs, and a bootstrap 95% interval of
    the mean for the headline metrics."""
    rows = []
    for label, samples in runs.items():
        row: dict[str, Any] = {"policy": label, "runs": len(samples)}
        for key in METRICS:
            values = np.array([s[key] for s in samples], dtype=float)
            finite = values[np.isfinite(values)]
            row[key] = float(finite.mean()) if finite.size else math.nan
            row[f"{key}_std"] = float(finite.std(ddof=1)) if finite.size > 1 else 0.0
            if key in CI_METRICS:
                row[f"{key}_ci"] = list(bootstrap_ci(values))
        rows.append(row)
    return rows


def paired_rows(runs: Runs, pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """``a - b`` for each pair, run by run (the same seed and fold), for each headline metric."""
    rows = []
    for a, b in pairs:
        for key in CI_METRICS:
            d = paired_difference(np.array([r[key] for r in runs[a]]), np.array([r[key] for r in runs[b]]))
            rows.append({"pair": f"{a} - {b}", "metric": key, "mean": d["mean"], "ci_low": d["ci_low"],
                         "ci_high": d["ci_high"], "wins": d["wins"], "pairs": int(d["pairs"])})
    return rows


def deflated_best(returns: dict[str, np.ndarray], periods_per_year: float) -> dict[str, Any]:
    """The deflated Sharpe ratio of the configuration whose test bar returns over cash (``returns[label]``:
    its runs' mean each bar, the folds end to end) have the highest Sharpe, given that all of them were tried;
    the variance of the trials' Sharpe ratios is taken across these configurations. ``periods_per_year``: the
    data's bars a year (evaluate's ``clock``), which annualise the Sharpe ratios."""
    sharpes = {label: _sharpe(r) for label, r in returns.items()}
    best = max(sharpes, key=lambda label: sharpes[label])
    variance = float(np.var(list(sharpes.values()), ddof=1)) if len(sharpes) > 1 else 0.0
    out = deflated_sharpe(returns[best], len(sharpes), variance)
    root = math.sqrt(periods_per_year)
    return {"best": best, "trials": len(sharpes), "bars": int(np.isfinite(returns[best]).sum()),
            "sharpe_annual": out["sharpe"] * root, "benchmark_sharpe_annual": out["benchmark_sharpe"] * root,
            "deflated_sharpe": out["deflated_sharpe"], "sharpe_variance": variance}


def _sharpe(r: np.ndarray) -> float:
    r = r[np.isfinite(r)]
    sd = r.std(ddof=1) if len(r) > 1 else 0.0
    return float(r.mean() / sd) if sd > 0 else 0.0


def display(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as text: percentages for returns and drawdowns, dollars per trade and of costs, mean +- std in one
    cell."""
    out = []
    for row in rows:
        cells: dict[str, Any] = {"policy": row["policy"], "runs": row["runs"]}
        for key in METRICS:
            mean, std = row[key], row[f"{key}_std"]
            if not math.isfinite(mean):
                cells[key] = "n/a"
            elif key == "ruined":  # a share of runs: its std says nothing more
                cells[key] = f"{100 * mean:.1f}%"
            elif key in ("total_return", "annual_return", "max_drawdown", "min_equity"):
                cells[key] = f"{100 * mean:.2f}% +- {100 * std:.2f}"
            elif key in ("profit_per_trade", "costs"):
                cells[key] = f"${mean:,.0f} +- {std:,.0f}"
            else:
                cells[key] = f"{mean:.3f} +- {std:.3f}" if "sharpe" in key else f"{mean:.1f} +- {std:.1f}"
            if key in CI_METRICS:
                low, high = row[f"{key}_ci"]
                scale, unit = (100, "%") if key == "total_return" else (1, "")
                cells[f"{key}_ci95"] = (f"[{scale * low:.2f}{unit},{scale * high:.2f}{unit}]"
                                        if math.isfinite(low) and math.isfinite(high) else "n/a")
        out.append(cells)
    return out
