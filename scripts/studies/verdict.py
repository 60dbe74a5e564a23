"""Does a configuration beat the benchmarks over every walk-forward test day? Ledoit and Wolf's Sharpe-difference
test on grids' test returns pooled across folds, seeds entering as one policy.

    python scripts/studies/verdict.py LABEL=FOLDER[:CONFIG] [LABEL=FOLDER[:CONFIG] ...] --name NAME
        [--rows docs/data/verdict] [--resamples 4999] [--json]
    python scripts/studies/verdict.py --show NAME [--rows docs/data/verdict]     # the rows as RESULTS shows them

FOLDER is the <out>/<data> folder reproduce_paper.py wrote (e.g. runs/annual-scale/sp500, its fold<k>/ runs
walked on their test years); CONFIG names its runs (clstm-tw30) where it holds several. Each label is tested
against best_conditional_rule, best_rule, buy-and-hold and putwrite, and every later label against the first, on
the same pooled days; the rows (with drawdown, CVaR, commit and machine) replace docs/data/verdict/NAME.csv.
docs/RESULTS.md, "The verdict".
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from clstm_lab.studies.verdict import SHOWN, VerdictError, pooled_runs, verdict_rows
from clstm_ppo.tables import format_records, provenance, strict_json


def _grid(spec: str) -> tuple[str, Path, str | None]:
    label, sep, where = spec.partition("=")
    if not sep or not label or not where:
        raise VerdictError(f"{spec!r}: write LABEL=FOLDER or LABEL=FOLDER:CONFIG, e.g. scale=runs/annual-scale/sp500")
    folder, _, config = where.partition(":")
    return label, Path(folder), config or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("grids", nargs="*", help="LABEL=FOLDER[:CONFIG], the first the one the others are paired with")
    parser.add_argument("--name", help="the verdict's name: its rows go to --rows/NAME.csv")
    parser.add_argument("--rows", type=Path, default=Path("docs/data/verdict"), help="folder of the verdicts' rows")
    parser.add_argument("--resamples", type=int, default=4999, help="bootstrap resamples (default 4999)")
    parser.add_argument("--show", metavar="NAME", help="print NAME's kept rows instead")
    parser.add_argument("--json", action="store_true", help="print every row as one JSON object last")
    args = parser.parse_args(argv)
    try:
        if args.show:
            path = args.rows / f"{args.show}.csv"
            if not path.is_file():
                raise VerdictError(f"{path} not found: run the verdict with --name {args.show} first")
            print(format_records(pd.read_csv(path)[list(SHOWN)].to_dict("records"), digits=3))
            return 0
        if not args.grids or not args.name:
            raise VerdictError("give at least one LABEL=FOLDER and --name (or --show NAME)")
        if args.resamples < 99:
            raise VerdictError(f"--resamples {args.resamples}: use at least 99 (4999 for a 95% interval's ends)")
        specs = [_grid(spec) for spec in args.grids]
        pooled = {label: pooled_runs(folder, config) for label, folder, config in specs}
        rows = verdict_rows(pooled, resamples=args.resamples)
    except (VerdictError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    command = " ".join(["python", "scripts/studies/verdict.py", *(argv if argv is not None else sys.argv[1:])])
    rows = [{"verdict": args.name, **row, **provenance(), "command": command} for row in rows]
    args.rows.mkdir(parents=True, exist_ok=True)
    path = args.rows / f"{args.name}.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    print(format_records([{k: row[k] for k in SHOWN} for row in rows], digits=3))
    print(f"{rows[0]['days']} test days {rows[0]['first_day']}..{rows[0]['last_day']}, {rows[0]['folds']} folds; "
          f"rows written to {path}")
    if args.json:
        print(strict_json({"rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
