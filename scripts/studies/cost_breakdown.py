"""Where a grid's money went: trading costs against losses, fold by fold (or configuration by configuration).

    python scripts/studies/cost_breakdown.py GRID.json --runs DIR [--by fold|config] [--pick best|smoothed]
        [--before 2018-02-01] [--json]

GRID.json is what ``scripts/studies/reproduce_paper.py --json`` printed (its log will do); DIR is where it trained the
runs (its ``--out`` / the data's name). Each run's test walk (``test_report.json``, written by that same command) gives,
per account (an underlying walked alone; the S&P 500 has one, the Dow stocks 17 a run), the fees, spreads and
slippage it paid, the commission among them, its closed option trades, its return and whether it was ruined.
For each group:

- ``costs_x_cash``: median costs over the walk as a multiple of the initial cash;
- ``commission_share``: median commission as a share of costs; ``commission_per_trade``: median commission per
  closed option trade, in dollars (per-contract fees: it grows with the contracts an order buys);
- ``ruined``: accounts that fell below ``env.ruin_fraction`` of their initial cash; ``costs_over_loss``: those
  among them whose costs exceed the money they lost (before costs their trading was level or ahead);
  ``bottomed_before``: those whose lowest close came before ``--before``.

Medians, not means: one run that trades thousands of contracts sets a mean. Use it to tell a strategy that loses
on its bets from one that is eaten by what it pays to trade (docs/RESULTS.md).
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
from pathlib import Path
from typing import Any

import yaml

from clstm_ppo.backtest.across_runs import read_grid, run_folder
from clstm_ppo.tables import print_table

PICKS = {"best": "best_composite.pt", "smoothed": "best_composite_smoothed.pt"}  # reproduce_paper's two picks
FIELDS = ("costs", "cost_commission", "trades", "total_return", "ruined", "max_drawdown_trough")


def accounts(run: dict[str, Any], folder: Path, pick: str) -> list[dict[str, Any]]:
    """One row per account of one run's test walk of ``pick``: ``FIELDS``, the run's keys and its initial cash."""
    report_path, config_path = folder / "test_report.json", folder / "config.yaml"
    for path in (report_path, config_path):
        if not path.is_file():
            raise SystemExit(f"error: {path} not found: --runs takes the folder reproduce_paper.py trained this grid "
                             "in (its --out, then the data's name), after its walk")
    report = json.loads(report_path.read_text())
    names = [Path(c).name for c in report["checkpoints"]]
    if PICKS[pick] not in names:
        raise SystemExit(f"error: {report_path} walked no {PICKS[pick]}: choose --pick "
                         f"{' or '.join(p for p, f in PICKS.items() if f in names)}")
    column = "agent" if len(names) == 1 else f"agent_{names.index(PICKS[pick]) + 1}"
    cash = float(yaml.safe_load(config_path.read_text())["env"]["initial_cash"])
    rows = []
    for symbol, m in report["policies"][column].items():
        missing = [k for k in FIELDS if k not in m]
        if missing:
            raise SystemExit(f"error: {report_path} has no {', '.join(missing)} (walked by an older commit): walk the "
                             "grid again with reproduce_paper.py at this commit, in a new --study")
        rows.append({**{k: m[k] for k in FIELDS}, "symbol": symbol, "cash": cash,
                     **{k: run[k] for k in ("config", "window", "seed", "fold")}})
    return rows


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None  # null in the JSON: nothing to take a median of


def breakdown(rows: list[dict[str, Any]], by: str, before: str | None) -> list[dict[str, Any]]:
    """One summary per value of ``by`` over the account rows, in the order the groups first appear."""
    out = []
    for group in dict.fromkeys(r[by] for r in rows):
        g = [r for r in rows if r[by] == group]
        ruined = [r for r in g if r["ruined"]]
        row = {by: group, "runs": len({(r["config"], r["window"], r["seed"], r["fold"]) for r in g}),
               "accounts": len(g),
               "costs_x_cash": _median([r["costs"] / r["cash"] for r in g]),
               "commission_share": _median([r["cost_commission"] / r["costs"] for r in g if r["costs"] > 0]),
               "commission_per_trade": _median([r["cost_commission"] / r["trades"] for r in g if r["trades"] > 0]),
               "trades": _median([float(r["trades"]) for r in g]),
               "ruined": len(ruined),
               "costs_over_loss": sum(r["costs"] > -r["total_return"] * r["cash"] for r in ruined)}
        if before is not None:
            row["bottomed_before"] = sum(r["max_drawdown_trough"] < before for r in ruined)
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("grid", type=Path, help="reproduce_paper.py --json output (or its log)")
    parser.add_argument("--runs", type=Path, required=True, help="the grid's run folders for its data")
    parser.add_argument("--by", choices=("fold", "config"), default="fold", help="one row per fold or configuration")
    parser.add_argument("--pick", choices=tuple(PICKS), default="best", help="which validation pick's walk to read")
    parser.add_argument("--before", help="count ruined accounts whose lowest close came before this date "
                                         "(YYYY-MM-DD)")
    parser.add_argument("--json", action="store_true", help="print every number as one JSON object last")
    args = parser.parse_args()
    if args.before is not None:
        try:
            args.before = str(datetime.date.fromisoformat(args.before))
        except ValueError:
            raise SystemExit(f"error: --before {args.before!r} is not a date: write it as YYYY-MM-DD") from None
    if not args.runs.is_dir():
        raise SystemExit(f"error: --runs {args.runs} is not a folder: give reproduce_paper.py's --out / the data's "
                         "name")
    rows = [a for run in read_grid(args.grid) for a in accounts(run, run_folder(args.runs, run), args.pick)]
    print(f"{len(rows)} accounts, {args.pick} pick; medians over accounts, counts of ruined accounts")
    extra = {"pick": args.pick, "by": args.by, **({"before": args.before} if args.before else {})}
    print_table(breakdown(rows, args.by, args.before), args.json, extra)


if __name__ == "__main__":
    main()
