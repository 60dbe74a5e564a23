"""Two runs of the paper comparison side by side, run by run: what changed when one thing changed between them.

    python scripts/studies/compare_grids.py docs/data/grids/sp500-ticks.csv docs/data/grids/sp500-dsr.csv \
        --names ticks dsr --configs clstm clstm+dsr [--runs A_DIR B_DIR] [--by config fold] [--json]

A and B are grids' CSVs (``docs/data/grids/<name>.csv``, what ``scripts/studies/reproduce_paper.py --grid`` wrote)
or what its ``--json`` printed (its log will do: the JSON is its last line), e.g. the same grid at two training
budgets, or with and without one lever. Runs are paired by
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
from pathlib import Path

from clstm_lab.studies.across_runs import read_grid
from clstm_lab.studies.grid_pairs import KEY, compare, renamed, with_learning
from clstm_ppo.tables import format_records, strict_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path, help="the first grid: its CSV (docs/data/grids/) or its --json output")
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
              "ci_low": r["ci_low"], "ci_high": r["ci_high"], "fold_ci_low": r["fold_ci_low"],
              "fold_ci_high": r["fold_ci_high"], f"{b} higher": r["b_higher"]} for r in rows]
    print(format_records(shown, digits=3))
    if args.json:
        print(strict_json({"names": [a, b], "rows": rows, **left_out}))


if __name__ == "__main__":
    main()
