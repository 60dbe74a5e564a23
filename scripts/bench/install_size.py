"""What each requirement of clstm_ppo adds to an install, from the running environment's installed distributions
(docs/BENCHMARKS.md, "Install"): the MB of its own dependency closure, and of candidate pip extras as groups.

    .venv/bin/python scripts/bench/install_size.py [--extras dev] [--csv docs/data/benchmarks/install.csv] [--json]

Run it in an environment that installed clstm_ppo (make's .venv). Rows append to --csv with the commit and machine.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from clstm_lab.bench.install_size import requirement_rows
from clstm_ppo.cli import run_cli
from clstm_ppo.tables import append_rows, format_records, provenance, strict_json

# The pip extras weighed: the tuning command's study and storages; the scenario generators' GARCH and bootstraps.
GROUPS = {"tune extra (optuna, sqlalchemy, psycopg)": ("optuna", "sqlalchemy", "psycopg"),
          "scenarios extra (arch)": ("arch",)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", nargs="*", default=[], help="count these extras' requirements too")
    parser.add_argument("--csv", type=Path, default=None, help="append the rows to this CSV")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = parser.parse_args(argv)
    rows = requirement_rows(extras=frozenset(args.extras), groups=GROUPS)
    print(strict_json(rows, indent=2) if args.json else format_records(rows, digits=3))
    if args.csv:
        append_rows(args.csv, [{**row, **provenance()} for row in rows])
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
