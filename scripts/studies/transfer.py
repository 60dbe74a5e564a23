"""The default agent on another underlying: a checkpoint walked over each Dow stock and over the S&P 500 at five
times its prices, beside buy-and-hold and best_rule (Sharpe ratios over the T-bill, the agent's option trades).

    python scripts/studies/transfer.py CHECKPOINT [--split test] [--out docs/data/transfer.csv] [--json]
    python scripts/studies/transfer.py --table [--out docs/data/transfer.csv]     # BACKTEST's table from the rows

Rows are appended to --out with the commit and machine that measured them (docs/BACKTEST.md, "Another underlying").
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

from clstm_lab.studies.transfer import transfer_rows, transfer_table
from clstm_ppo.cli import run_cli
from clstm_ppo.tables import append_rows, print_table, strict_json

SHOWN = ("underlying", "trades", "sharpe_excess", "buy_and_hold", "best_rule", "same_actions",
         "max_daily_return_diff")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", nargs="?",
                        help="a checkpoint trained on the S&P 500 (e.g. RUN/best_composite.pt)")
    parser.add_argument("--table", action="store_true", help="print BACKTEST's table from the rows in --out instead")
    parser.add_argument("--split", default="test", choices=("validation", "test"), help="the split walked")
    parser.add_argument("--out", type=Path, default=Path("docs/data/transfer.csv"), help="CSV the rows go to")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--json", action="store_true", help="print every row as one JSON object last")
    args = parser.parse_args(argv)
    if args.table:
        with args.out.open(newline="") as f:
            print(transfer_table(list(csv.DictReader(f))))
        return 0
    if args.checkpoint is None:
        parser.error("give a CHECKPOINT to walk, or --table to print the rows' table")
    rows = transfer_rows(args.checkpoint, args.split, args.device)
    append_rows(args.out, rows)
    print_table([{key: row[key] for key in SHOWN} for row in rows], False)
    print(f"best_rule: {', '.join(sorted({row['best_rule_name'] for row in rows}))}; {len(rows)} rows appended to "
          f"{args.out} ({rows[0]['commit']}, {rows[0]['machine']})")
    if args.json:
        print(strict_json({"rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
