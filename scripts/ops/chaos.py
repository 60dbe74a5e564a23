"""Nothing lost under chaos: random SIGKILLs of a random rank, resumed each time, against an uninterrupted run;
and the faults a run must survive with one line and nothing damaged (lab/clstm_lab/bench/chaos.py says how).

    python scripts/ops/chaos.py [--workers 1 2] [--kills 3] [--updates 24] [--seed 0] [--json]

docs/RELIABILITY.md has the long runs; tests/test_chaos.py runs the short version.
"""
from __future__ import annotations

import argparse
import json

from clstm_lab.bench.chaos import UPDATES, run_chaos
from clstm_ppo.tables import print_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to kill runs of")
    parser.add_argument("--kills", type=int, default=3, help="random kills per worker count")
    parser.add_argument("--updates", type=int, default=UPDATES,
                        help="updates of each run (at least 4 per kill, plus 4; CI's short version takes 8)")
    parser.add_argument("--seed", type=int, default=0, help="where and when the kills land")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        result = run_chaos(args.workers, args.kills, args.updates, args.seed)
    except RuntimeError as err:
        raise SystemExit(f"error: {err}") from None
    print_table([{k: v for k, v in r.items() if k != "error"} for r in result["runs"]], False)
    for r in result["runs"]:
        if r["error"]:
            print(f"{r['workers']} worker(s): {r['error']}")
    for name, fault in result["faults"].items():
        print(f"{name}: {'pass' if fault['passed'] else 'FAIL'}  {fault['line']}")
    if args.json:
        print(json.dumps(result, allow_nan=False))


if __name__ == "__main__":
    main()
