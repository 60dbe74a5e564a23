"""Two ranks on one device train as one job: weights equal after every update, no collective inside a CUDA-graph
capture, and the run resumed on one CPU rank.

    python scripts/bench/check_ranks_agree.py [--device cpu|cuda] [--updates 3] [--eager] [--json]

On CUDA both ranks share the one GPU (launch.ranks_per_gpu=2, over gloo), compiled and replayed as CUDA graphs
unless --eager; on the CPU they are two CPU workers, compiled unless --eager. Exits 1 when a check fails.
docs/DISTRIBUTED.md says what each row shows.
"""
from __future__ import annotations

import argparse
import sys

from clstm_lab.bench.ranks_agree import check
from clstm_ppo.tables import print_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"), help="where both ranks train")
    parser.add_argument("--updates", type=int, default=3, help="updates of the two-rank run (each one compared)")
    parser.add_argument("--eager", action="store_true", help="leave the env step and decisions uncompiled")
    parser.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    args = parser.parse_args()
    if args.updates < 1:
        parser.error(f"--updates is {args.updates}: give 1 or more")
    rows = check(args.device, args.updates, compiled=not args.eager)
    print_table(rows, args.json, {"device": args.device})
    sys.exit(0 if all(r["passed"] for r in rows) else 1)


if __name__ == "__main__":
    main()
