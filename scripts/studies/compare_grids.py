"""Two runs of the paper comparison side by side, run by run: what changed when one thing changed between them.

    python scripts/studies/compare_grids.py A.json B.json [--names 50k 500k] [--runs A_DIR B_DIR] [--by config fold]
        [--configs clstm clstm+dsr] [--json]

A and B are what ``scripts/studies/reproduce_paper.py --json`` printed (its log will do: the JSON is its last line),
e.g. the same grid at two training budgets, or before and after a change to the market; or ``FILE.md#DATA``, the
"Each run" block reproduce_paper.py wrote into that data's section of a results file (``docs/RESULTS.md#sp500``: a
recorded grid whose log and run folders are gone, to 4 decimals). Runs are paired by
configuration, window, seed and fold: a pair differs only in what differs between the two grids. For each
configuration both grids share, and for each headline metric: A's and B's mean +- std over the shared runs, and
B - A paired run by run with its bootstrap 95% interval and the share of runs where B is higher (statistics as in
the comparison itself, ``clstm_ppo/backtest/statistics.py``). Runs that only one grid has are counted and left out.

``--runs`` (each grid's run folders for its data: reproduce_paper's ``--out`` / the data's name) adds what each run
learnt where it trained and validated, read from its metrics.jsonl: the mean return of the training episodes that
ended in the last tenth of its env steps (``train_return_end``, % of the account per episode) and the Sharpe of
its last validation walk (``val_sharpe_last``). A run that earns more on its training years but no more on
validation or test years has fitted its training years, not learnt a lasting edge.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from clstm_ppo.backtest.across_runs import read_grid, run_folder
from clstm_ppo.backtest.statistics import paired_difference
from clstm_ppo.tables import format_records, strict_json

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
            d = paired_difference(y, x)
            rows.append({**dict(zip(by, values, strict=True)), "metric": metric, "runs": len(keys),
                         "a_mean": _mean(x), "a_std": _std(x), "b_mean": _mean(y), "b_std": _std(y),
                         "b_minus_a": d["mean"], "ci_low": d["ci_low"], "ci_high": d["ci_high"], "b_higher": d["wins"]})
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path, help="reproduce_paper.py --json output of the first grid, or FILE.md#DATA")
    parser.add_argument("b", type=Path, help="the same of the second grid")
    parser.add_argument("--names", nargs=2, default=["A", "B"], metavar=("A", "B"), help="what to call them")
    parser.add_argument("--runs", nargs=2, type=Path, metavar=("A_DIR", "B_DIR"),
                        help="each grid's run folders for its data, to compare what the runs learnt")
    parser.add_argument("--by", nargs="+", default=["config"], choices=KEY,
                        help="what a row pairs within: the configuration (default), or e.g. config fold")
    parser.add_argument("--configs", nargs=2, metavar=("A_CONFIG", "B_CONFIG"),
                        help="pair A's configuration A_CONFIG with B's B_CONFIG (e.g. clstm with clstm+dsr: the same "
                             "agent under another reward), and leave their other configurations out")
    parser.add_argument("--json", action="store_true", help="print every number as one JSON object last")
    args = parser.parse_args()
    a_runs, b_runs = read_grid(args.a), read_grid(args.b)
    if args.configs:
        a_runs, b_runs = renamed(a_runs, args.configs[0], args.configs[0]), renamed(b_runs, *reversed(args.configs))
    if args.runs:
        a_runs, b_runs = with_learning(a_runs, args.runs[0]), with_learning(b_runs, args.runs[1])
    rows, left_out = compare(a_runs, b_runs, tuple(args.by))
    a, b = args.names
    print(f"{b} - {a}, paired by configuration, window, seed and fold; runs in one grid only: "
          f"{left_out['only_a']} of {a}, {left_out['only_b']} of {b}")
    shown = [{**{k: r[k] for k in args.by}, "metric": r["metric"], "runs": r["runs"], f"{a} mean": r["a_mean"],
              f"{a} std": r["a_std"], f"{b} mean": r["b_mean"], f"{b} std": r["b_std"], f"{b} - {a}": r["b_minus_a"],
              "ci_low": r["ci_low"], "ci_high": r["ci_high"], f"{b} higher": r["b_higher"]} for r in rows]
    print(format_records(shown, digits=3))
    if args.json:
        print(strict_json({"names": [a, b], "rows": rows, **left_out}))


if __name__ == "__main__":
    main()
