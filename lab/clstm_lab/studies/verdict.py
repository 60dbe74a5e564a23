"""The verdict over walk-forward test years laid end to end (docs/RESULTS.md, "The verdict"): each configuration's
daily test returns pooled from its run folders (reproduce_paper.py's layout: <data>/fold<k>/<run>-seed<s>/
test_returns.csv), its seeds entering as one policy (their mean return, day by day), each test day once; then
Ledoit and Wolf's Sharpe-difference test (clstm_ppo.backtest.sharpe_difference) of each configuration against each
benchmark and against the first configuration, with every strategy's drawdown and CVaR beside it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clstm_ppo.backtest.sharpe_difference import sharpe_difference
from clstm_ppo.backtest.stress import drawdowns, tail_mean

AGENT_COLUMNS = ("agent_1", "agent")  # the validation's best_composite pick: evaluate's first checkpoint
BENCHMARKS = ("best_conditional_rule", "best_rule", "buy_and_hold", "putwrite")
TBILL = "tbill"
SHOWN = ("a", "b", "sharpe_a", "sharpe_b", "difference", "ci_low", "ci_high", "p_value", "edge_ruled_out",
         "max_drawdown_a", "max_drawdown_b", "daily_cvar5_a", "daily_cvar5_b")  # what RESULTS' table shows
SEED = re.compile(r"^(?P<config>.+)-seed(?P<seed>\d+)$")


class VerdictError(ValueError):
    """Run folders that cannot be pooled, in one line with the fix."""


@dataclass(frozen=True)
class Pooled:
    """One grid's test days end to end: per-day returns (raw) and the T-bill, by policy."""

    dates: pd.DatetimeIndex
    returns: dict[str, np.ndarray]
    tbill: np.ndarray
    folds: int
    seeds: int


def _policy(frame: pd.DataFrame, policy: str) -> pd.Series | None:
    """A policy's return day by day, the mean over underlyings where the walk had several ("agent_1:AAPL")."""
    columns = frame.filter(regex=f"^{re.escape(policy)}(:|$)")
    return None if columns.empty else columns.mean(axis=1)


def _fold_key(path: Path) -> tuple[int, str]:
    name = path.name
    return (int(name[4:]), name) if name[4:].isdigit() else (-1, name)


def pooled_runs(folder: Path, config: str | None = None) -> Pooled:
    """The runs of ``config`` (default: the folder's one configuration) under ``folder`` (<out>/<data>), pooled:
    each fold's seeds averaged day by day, the benchmarks taken once a fold (every seed of a fold walks the same
    ones), the folds end to end in their order."""
    folds = sorted((p for p in folder.glob("fold*") if p.is_dir()), key=_fold_key) or \
        [p for p in (folder / "split",) if p.is_dir()]
    if not folds:
        raise VerdictError(f"{folder} holds no fold<k>/ folders; pass the <out>/<data> folder reproduce_paper.py wrote")
    configs = {SEED.match(p.parent.name)["config"] for f in folds for p in f.glob("*/test_returns.csv")
               if SEED.match(p.parent.name)}
    if config is None:
        if len(configs) != 1:
            raise VerdictError(f"{folder} holds configurations {sorted(configs) or 'none'}; name one as "
                               "LABEL=FOLDER:CONFIG")
        config = configs.pop()
    parts: list[pd.DataFrame] = []
    seeds_per_fold = []
    for fold in folds:
        files = sorted(fold.glob(f"{config}-seed*/test_returns.csv"))
        if not files:
            raise VerdictError(f"{fold} has no walked run of {config} (test_returns.csv): finish the grid first")
        frames = [pd.read_csv(f, index_col="date", parse_dates=["date"]) for f in files]
        agent = next((c for c in AGENT_COLUMNS if _policy(frames[0], c) is not None), None)
        if agent is None:
            raise VerdictError(f"{files[0]} has no agent column ({', '.join(AGENT_COLUMNS)})")
        for f, frame in zip(files[1:], frames[1:], strict=True):
            if not frame.index.equals(frames[0].index):
                raise VerdictError(f"{f} walked other days than {files[0]}: one fold's seeds share their test days")
        day = pd.DataFrame({"agent": pd.concat([_policy(f, agent) for f in frames], axis=1).mean(axis=1)})
        for bench in (*BENCHMARKS, TBILL):
            walks = [_policy(f, bench) for f in frames]
            if walks[0] is None:
                continue
            if any(w is None or not np.allclose(w.to_numpy(), walks[0].to_numpy(), rtol=0, atol=1e-12)
                   for w in walks[1:]):
                raise VerdictError(f"{fold}: the seeds of {config} walked different {bench}; a fold's benchmark is "
                                   "picked on its validation years alone, so its runs must share one walk")
            day[bench] = walks[0]
        parts.append(day)
        seeds_per_fold.append(len(files))
    pooled = pd.concat(parts)
    if not pooled.index.is_monotonic_increasing or pooled.index.has_duplicates:
        twice = pooled.index[pooled.index.duplicated()]
        raise VerdictError(f"{folder}: the folds' test days overlap or run backwards (e.g. "
                           f"{(twice[0] if len(twice) else pooled.index[0]).date()}); the verdict uses each test day "
                           "once: pool folds whose test years follow one another (--folds annual or N)")
    if TBILL not in pooled or pooled.isna().any().any():
        raise VerdictError(f"{folder}: a fold lacks the T-bill or a benchmark's walk; walk every fold with the same "
                           "evaluate")
    return Pooled(dates=pooled.index, returns={c: pooled[c].to_numpy() for c in pooled if c != TBILL},
                  tbill=pooled[TBILL].to_numpy(), folds=len(folds), seeds=min(seeds_per_fold))


def risk(returns: np.ndarray) -> dict[str, float]:
    """The walk's total and annual return, its largest drawdown and its CVaR(5%) of daily returns."""
    equity = np.concatenate([[1.0], np.cumprod(1.0 + returns)])
    years = len(returns) / 252.0
    return {"total_return": float(equity[-1] - 1.0), "annual_return": float(equity[-1] ** (1.0 / years) - 1.0),
            "max_drawdown": float(drawdowns(equity[None])[0]), "daily_cvar5": tail_mean(returns)}


def verdict_rows(grids: dict[str, Pooled], resamples: int = 4999, seed: int = 0) -> list[dict[str, Any]]:
    """For each configuration (label -> pooled runs): it less each benchmark, then each later configuration less the
    first; the Sharpe ratios over the T-bill, the difference with its HAC standard error, 95% interval, p-value and
    the largest edge the data leave open, each side's drawdown and CVaR."""
    labels = list(grids)
    first = grids[labels[0]]
    for lab in labels[1:]:
        if not grids[lab].dates.equals(first.dates):
            raise VerdictError(f"{lab} and {labels[0]} were tested on other days; compare grids of the same data "
                               "and folds")
    pairs = [(lab, grids[lab].returns["agent"], bench, grids[lab].returns[bench])
             for lab in labels for bench in BENCHMARKS if bench in grids[lab].returns]
    pairs += [(lab, grids[lab].returns["agent"], labels[0], first.returns["agent"]) for lab in labels[1:]]
    rows, tbill = [], first.tbill  # every grid walked the same days, so one T-bill
    for a_name, a, b_name, b in pairs:
        test = sharpe_difference(a - tbill, b - tbill, resamples=resamples, seed=seed)
        ra, rb = risk(a), risk(b)
        rows.append({"a": a_name, "b": b_name, "sharpe_a": test.sharpe_a, "sharpe_b": test.sharpe_b,
                     "difference": test.difference, "hac_se": test.hac_se, "ci_low": test.ci_low,
                     "ci_high": test.ci_high, "p_value": test.p_value, "edge_ruled_out": test.edge_ruled_out,
                     "correlation": test.correlation, "days": test.days,
                     "first_day": str(first.dates[0].date()), "last_day": str(first.dates[-1].date()),
                     "folds": first.folds, "seeds": grids[a_name].seeds,
                     **{f"{k}_a": v for k, v in ra.items()}, **{f"{k}_b": v for k, v in rb.items()}})
    return rows
