"""docs/RESULTS.md's tables, made from the grids' rows (docs/data/grids/<grid>.csv, written by
scripts/studies/reproduce_paper.py): a table is a block between ``<!-- table NAME -->`` and ``<!-- end table -->`` lines
whose body is what ``render`` gives for NAME, so the doc is regenerated, never edited by hand
(``scripts/studies/results_tables.py --write``), and a test checks it is current.

NAME is ``against GRID``: each agent configuration of GRID against the benchmarks walked on the same folds
(buy_and_hold, best_rule, putwrite where the grid has them), paired by seed and fold; or ``pair GRID_A:CONFIG_A
GRID_B:CONFIG_B``: B's configuration less A's, run by run over the (window, seed, fold) both have: what one
change made (a lever against the grid it changed); or ``levers BASE:CONFIG GRID:CONFIG ...``: one line a lever, its
Sharpe over the T-bill less BASE's run by run, then less ``best_rule`` walked on its own folds; or ``verdict NAME``:
the Sharpe-difference tests scripts/studies/verdict.py kept in docs/data/verdict/NAME.csv (test days pooled over
folds, seeds as one policy), the table the verdict's lead shows.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from clstm_lab.studies.across_runs import CI_METRICS, read_grid_csv
from clstm_lab.studies.verdict import SHOWN as VERDICT_COLUMNS
from clstm_ppo.backtest.statistics import paired_difference
from clstm_ppo.tables import format_records

BENCHMARKS = ("buy_and_hold", "best_rule", "putwrite", "best_conditional_rule")  # the last: grids from 2026-12
BLOCK = re.compile(r"<!-- table (?P<name>[^>]+?) -->\n(?P<body>.*?)<!-- end table -->", re.S)
Grids = dict[str, list[dict[str, Any]]]


def load_grids(folder: Path) -> Grids:
    """Every grid CSV of ``folder`` by its name."""
    return {path.stem: read_grid_csv(path) for path in sorted(folder.glob("*.csv"))}


def load_verdicts(folder: Path) -> Grids:
    """Every verdict's rows (docs/data/verdict/NAME.csv, scripts/studies/verdict.py) by its name."""
    import csv

    out = {}
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="") as fh:
            out[path.stem] = list(csv.DictReader(fh))
    return out


def verdict_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A verdict's rows as RESULTS shows them: each test's pair, Sharpe ratios, difference, interval, p-value, the
    largest edge left open, and both sides' drawdown and daily CVaR(5%)."""
    return [{k: (row[k] if k in ("a", "b") else float(row[k])) for k in VERDICT_COLUMNS} for row in rows]


def _keyed(rows: list[dict[str, Any]], config: str, with_window: bool = True) -> dict[tuple, dict[str, Any]]:
    key = (lambda r: (r["window"], r["seed"], r["fold"])) if with_window else (lambda r: (r["seed"], r["fold"]))
    return {key(r): r for r in rows if r["config"] == config}


def _pair_rows(a: dict[tuple, dict[str, Any]], b: dict[tuple, dict[str, Any]], pair: str,
               metrics: tuple[str, ...] = CI_METRICS) -> list[dict[str, Any]]:
    """``b - a`` run by run over the keys both have, per metric: mean, bootstrap 95% interval over runs, the
    fold-clustered one (folds, then seeds within them: statistics.clustered_bootstrap_ci), share of wins."""
    shared = [k for k in a if k in b]
    folds = np.array([k[-1] for k in shared])  # every key ends with the fold
    rows = []
    for metric in metrics:
        x = np.array([a[k].get(metric, np.nan) for k in shared], dtype=float)
        y = np.array([b[k].get(metric, np.nan) for k in shared], dtype=float)
        if not np.isfinite(x).any() or not np.isfinite(y).any():
            continue  # an older grid recorded only the benchmarks' Sharpe
        d = paired_difference(y, x, groups=folds)
        rows.append({"pair": pair, "metric": metric, "mean": d["mean"], "ci_low": d["ci_low"],
                     "ci_high": d["ci_high"], "fold_ci_low": d["fold_ci_low"], "fold_ci_high": d["fold_ci_high"],
                     "wins": d["wins"], "pairs": int(d["pairs"]), "folds": int(d["folds"])})
    return rows


def against_benchmarks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each agent configuration less each benchmark, paired by seed and fold."""
    configs = list(dict.fromkeys(r["config"] for r in rows if r["config"] not in (*BENCHMARKS, "macd_rule")))
    out = []
    for config in configs:
        mine = _keyed(rows, config, with_window=False)
        for bench in BENCHMARKS:
            theirs = _keyed(rows, bench, with_window=False)
            if theirs:
                out += _pair_rows(theirs, mine, f"{config} - {bench}")
    return out


def paired_grids(grids: Grids, a: str, b: str, metrics: tuple[str, ...] = CI_METRICS) -> list[dict[str, Any]]:
    """``GRID_B:CONFIG_B - GRID_A:CONFIG_A`` run by run (window, seed, fold)."""
    (grid_a, config_a), (grid_b, config_b) = (spec.split(":", 1) for spec in (a, b))
    return _pair_rows(_keyed(grids[grid_a], config_a), _keyed(grids[grid_b], config_b), f"{b} - {a}", metrics)


def lever_rows(grids: Grids, base: str, levers: list[str]) -> list[dict[str, Any]]:
    """One row a lever (``GRID:CONFIG``): its Sharpe over the T-bill less ``base``'s in the same (window, seed, fold),
    with both intervals (runs; folds, then seeds), then less ``best_rule`` in the same (seed, fold) (NaN where the
    lever's grid walked no best_rule)."""
    out = []
    for lever in levers:
        grid, config = lever.split(":", 1)
        paired = paired_grids(grids, base, lever, ("sharpe_excess",))
        if not paired:
            raise SystemExit(f"error: {lever} shares no (window, seed, fold) with {base}: pair a lever with the grid "
                             "whose settings it changed")
        effect = paired[0]
        rule = _pair_rows(_keyed(grids[grid], "best_rule", with_window=False),
                          _keyed(grids[grid], config, with_window=False), "", ("sharpe_excess",))
        against = rule[0] if rule else {"mean": np.nan, "ci_low": np.nan, "ci_high": np.nan}
        out.append({"lever": lever, **{k: effect[k] for k in ("pairs", "folds", "mean", "ci_low", "ci_high",
                                                               "fold_ci_low", "fold_ci_high", "wins")},
                    "vs_best_rule": against["mean"], "rule_ci_low": against["ci_low"],
                    "rule_ci_high": against["ci_high"]})
    return out


def render(name: str, grids: Grids, verdicts: Grids | None = None) -> str:
    """The body of table ``name`` (a fenced block of ``tables.format_records``)."""
    kind, _, rest = name.partition(" ")
    if kind == "verdict":
        if rest not in (verdicts or {}):
            raise SystemExit(f"error: table {name!r}: no verdict {rest!r} under docs/data/verdict/; run "
                             f"scripts/studies/verdict.py ... --name {rest}")
        rows = verdict_table(verdicts[rest])
    elif kind == "against" and rest in grids:
        rows = against_benchmarks(grids[rest])
    elif (kind == "pair" and len(rest.split()) == 2) or (kind == "levers" and len(rest.split()) >= 2):
        specs = rest.split()
        missing = [s.split(":")[0] for s in specs if s.split(":")[0] not in grids]
        if missing:
            raise SystemExit(f"error: table {name!r}: no grid {missing[0]!r} under docs/data/grids/")
        rows = paired_grids(grids, *specs) if kind == "pair" else lever_rows(grids, specs[0], specs[1:])
    else:
        raise SystemExit(f"error: table {name!r}: write 'against GRID', 'pair GRID_A:CONFIG GRID_B:CONFIG', 'levers "
                         f"BASE:CONFIG GRID:CONFIG ...' with grids of docs/data/grids/ ({', '.join(grids)}) or "
                         "'verdict NAME'")
    # The fold-clustered interval stays in the rows, not in the doc: over 3 folds a percentile bootstrap's ends are
    # the lowest and highest fold mean, an interval that covers 75%, not 95% (docs/BACKTEST.md).
    shown = [{k: v for k, v in r.items() if k not in ("fold_ci_low", "fold_ci_high")} for r in rows]
    return "```\n" + format_records(shown, digits=3) + "\n```\n"


def refreshed(text: str, grids: Grids, verdicts: Grids | None = None) -> str:
    """``text`` with every table block's body made again from ``grids`` and ``verdicts``."""
    return BLOCK.sub(lambda m: f"<!-- table {m['name']} -->\n{render(m['name'], grids, verdicts)}<!-- end table -->",
                     text)
