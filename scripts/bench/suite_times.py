"""How long the test suite takes on this CPU, test by test, from pytest's JUnit XML (docs/BENCHMARKS.md).

    .venv/bin/python -m pytest -q -n 2 --dist loadgroup --junitxml=/tmp/suite.xml   # or: make test PYTEST_ARGS=...
    python scripts/bench/suite_times.py /tmp/suite.xml --wall 812 [--top 15] [--csv docs/data/benchmarks/tests.csv]
        [--json]

Prints the slowest tests, the sum of test time and the wall time given (two workers share the sum), and the CPU's
instruction set (AVX-512 or AVX2 only: ATen and oneDNN pick their kernels by it, so the same suite runs at another
speed). With --csv the rows are appended to the benchmarks' table (one per test over 5 s, and the totals).
"""
from __future__ import annotations

import argparse
import datetime
import subprocess
from pathlib import Path

from clstm_lab.bench.suite_times import cpu_label, read_test_times, suite_rows
from clstm_ppo.cli import run_cli
from clstm_ppo.tables import format_records, strict_json


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path, help="pytest's --junitxml file")
    parser.add_argument("--wall", type=float, required=True, help="the suite's wall seconds (pytest's last line)")
    parser.add_argument("--top", type=int, default=15, help="how many of the slowest tests to print")
    parser.add_argument("--csv", type=Path, default=None, help="append the rows to this benchmarks CSV")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = parser.parse_args(argv)
    times = read_test_times(args.junit)
    rows = suite_rows(times, args.wall, cpu_label(), commit(), datetime.date.today().isoformat(), args.top)
    print(strict_json(rows, indent=2) if args.json else format_records(rows, digits=1))
    if args.csv:
        import pandas as pd

        frame = pd.DataFrame(rows)
        if args.csv.exists():  # the file's own column order
            frame = frame[pd.read_csv(args.csv, nrows=0).columns.tolist()]
        frame.to_csv(args.csv, mode="a", header=not args.csv.exists(), index=False)
        print(f"{len(rows)} rows appended to {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
