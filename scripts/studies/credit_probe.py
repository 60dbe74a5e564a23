"""What PPO's update learns from on the planted market, update by update: a scale agent's free decisions split by the
hidden premium's state and the multiple chosen, with their mean advantage and the multiple the policy chose on
average in each state (docs/PLANTED.md, "Why").

    python scripts/studies/credit_probe.py --set agent.actions=scale [--set ppo.credit=position ...] --label NAME
        [--updates 49] [--bandit SIGMA] [--seed 0] [--rows docs/data/planted/credit_probe.csv]

``--bandit SIGMA`` pays each free decision at once, its multiple times the rich edge plus noise of SIGMA: the
learner with credit taken out of the problem. Rows are appended with the label, commit and machine.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from clstm_lab.studies.credit_probe import probe_rows
from clstm_ppo.cli import run_cli
from clstm_ppo.tables import append_rows, provenance


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--label", required=True, help="names the probe's rows")
    parser.add_argument("--updates", type=int, default=49, help="PPO updates (49: the default budget's)")
    parser.add_argument("--bandit", type=float, default=None, metavar="SIGMA")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", type=Path, default=Path("docs/data/planted/credit_probe.csv"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    where = provenance()
    with tempfile.TemporaryDirectory() as run_dir:
        rows = [{"label": args.label, **row, "sets": " ".join(args.overrides),
                 "bandit": "" if args.bandit is None else args.bandit, **where}
                for row in probe_rows(args.overrides, Path(run_dir), args.updates, args.bandit, args.seed)]
    append_rows(args.rows, rows)
    last = [r for r in rows if r["update"] == args.updates - 1]
    rich = next(r["chosen_multiple"] for r in last if r["rich"])
    other = next(r["chosen_multiple"] for r in last if not r["rich"])
    print(f"{args.label}: after {args.updates} updates the policy chose {rich:.2f}x on rich bars, {other:.2f}x on the "
          f"others; {len(rows)} rows appended to {args.rows}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
