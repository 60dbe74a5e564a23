"""What a trained agent does on its greedy walk: its action mix, how sure it is of each choice, and which
checkpoints walk identically.

    python scripts/studies/agent_actions.py CHECKPOINT [CHECKPOINT ...] [--split test] [--set KEY=VALUE ...] [--json]

Each checkpoint walks its own split (as ``python -m clstm_ppo.evaluate`` does: its settings, then ``--set``)
greedily, the argmax of its masked policy on every bar, and the walk records every chosen action. Per checkpoint:

- ``return``, ``sharpe_excess`` (over the T-bill, annualised) and closed ``trades`` of the walk (the mean over
  the underlyings, which each walk alone);
- ``walk``: a fingerprint of its equity curve (cents); checkpoints with the same one walked identically;
- ``top_actions``: the three most chosen actions and their share of decisions;
- ``p_greedy``: the median over decisions of the policy's probability of the action it took, beside
  ``p_uniform``, the median of 1 / (valid actions): a greedy walk of a policy near ``p_uniform`` is a fixed rule
  that a small tilt of the logits chose, not a confident one; ``sure``: decisions whose action had p > 0.5;
- ``closest_rule``: of the fixed rules evaluate's ``best_rule`` is picked from (clstm_ppo/backtest/rules.py),
  walked over the same split, the one whose daily returns correlate most with the walk's, and ``rule_corr``
  that correlation (1.0: the walk is that rule, or moves with it day for day).

The summary line counts distinct walks. Several seeds of one configuration with one fingerprint are one policy,
not several draws (docs/RESULTS.md). ``--set`` walks the same weights in another market, e.g.
``--set market.costs.index_ticks=[0.05,0.1]`` for checkpoints trained before options quoted on a tick grid.
"""
from __future__ import annotations

import argparse

import torch

from clstm_lab.studies.agent_actions import action_census, table_row
from clstm_ppo.cli import run_cli
from clstm_ppo.data.dataset import SPLITS
from clstm_ppo.device import DEVICE_CHOICES, pick_device
from clstm_ppo.tables import print_table, strict_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", help=".pt files written by python -m clstm_ppo.train")
    parser.add_argument("--split", default="test", choices=SPLITS, help="the split each checkpoint walks")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting of the checkpoints', e.g. --set market.costs.index_ticks=[0,0]")
    parser.add_argument("--device", default="cpu", choices=DEVICE_CHOICES)
    parser.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = action_census(args.checkpoints, args.split, args.overrides, pick_device(args.device))
    print_table([table_row(r) for r in out["rows"]], False, {
        "split": args.split, "overrides": " ".join(args.overrides) or "none",
        "distinct walks": f"{out['distinct_walks']} of {len(out['rows'])} (largest group {out['largest_group']})"})
    if args.json:
        print(strict_json(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
