"""Make docs/RESULTS.md's tables from the grids' rows (docs/data/grids/*.csv), or check they are current.

    python scripts/studies/results_tables.py [--doc docs/RESULTS.md] [--grids docs/data/grids] [--write | --check]
    python scripts/studies/results_tables.py --show "against sp500-ticks"

Each ``<!-- table NAME -->`` block of the doc is made again from the CSVs (lab/clstm_lab/studies/results_tables.py
says what NAME may be). Without --write or --check, the refreshed doc is printed; --check exits 1 when the doc is
not what its grids give.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clstm_lab.studies.results_tables import load_grids, load_verdicts, refreshed, render


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--doc", type=Path, default=Path("docs/RESULTS.md"))
    parser.add_argument("--grids", type=Path, default=Path("docs/data/grids"))
    parser.add_argument("--verdicts", type=Path, default=Path("docs/data/verdict"),
                        help="the verdicts' rows (scripts/studies/verdict.py) for 'verdict NAME' tables")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--write", action="store_true", help="write the refreshed tables into --doc")
    how.add_argument("--check", action="store_true", help="exit 1 where --doc's tables are not its grids' own")
    how.add_argument("--show", metavar="NAME", help="print one table, e.g. 'against sp500-ticks'")
    args = parser.parse_args()
    grids, verdicts = load_grids(args.grids), load_verdicts(args.verdicts)
    if args.show:
        print(render(args.show, grids, verdicts), end="")
        return 0
    if not args.doc.is_file():
        raise SystemExit(f"error: {args.doc} not found; give the doc whose tables to make with --doc")
    text = args.doc.read_text()
    new = refreshed(text, grids, verdicts)
    if args.check:
        if new != text:
            print(f"{args.doc}'s tables are not what {args.grids} gives: run scripts/studies/results_tables.py --write")
            return 1
        return 0
    if args.write:
        args.doc.write_text(new)
        return 0
    print(new, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
