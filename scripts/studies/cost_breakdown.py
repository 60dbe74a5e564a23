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
import sys
from pathlib import Path

from clstm_lab.studies.cost_breakdown import GROUPS, PICKS, GridInputError, cost_breakdown
from clstm_ppo.tables import print_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("grid", type=Path, help="reproduce_paper.py --json output (or its log)")
    parser.add_argument("--runs", type=Path, required=True, help="the grid's run folders for its data")
    parser.add_argument("--by", choices=GROUPS, default="fold", help="one row per fold or configuration")
    parser.add_argument("--pick", choices=tuple(PICKS), default="best", help="which validation pick's walk to read")
    parser.add_argument("--before", help="count ruined accounts whose lowest close came before this date "
                                         "(YYYY-MM-DD)")
    parser.add_argument("--json", action="store_true", help="print every number as one JSON object last")
    args = parser.parse_args(argv)
    try:
        rows, extra = cost_breakdown(args.grid, args.runs, args.by, args.pick, args.before)
    except GridInputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{extra.pop('accounts')} accounts, {args.pick} pick; medians over accounts, counts of ruined accounts")
    print_table(rows, args.json, extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
