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
from collections import Counter
from typing import Any

import numpy as np
import torch

from clstm_ppo.agent.loading import load_agent
from clstm_ppo.backtest.across_runs import fingerprint
from clstm_ppo.backtest.policies import agent_logits
from clstm_ppo.backtest.report import underlying_metrics
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.rules import walk_family
from clstm_ppo.backtest.walk import walk
from clstm_ppo.cli import run_cli
from clstm_ppo.config import to_dict
from clstm_ppo.data.dataset import SPLITS
from clstm_ppo.device import DEVICE_CHOICES, pick_device
from clstm_ppo.env import ActionSpace, Observation
from clstm_ppo.tables import print_table, strict_json

TOP = 3  # actions listed per checkpoint
SURE = 0.5  # a decision is sure where its action's probability exceeds this


def census(path: str, split: str, overrides: list[str], device: torch.device,
           rule_walks: dict[str, dict[str, WalkResult]]) -> dict[str, Any]:
    """One checkpoint's greedy walk over ``split``: its metrics, fingerprint, action statistics and closest fixed
    rule. ``rule_walks`` keeps the rules' walks of each market and split met so far (checkpoints of one fold share
    them)."""
    cfg, data, model = load_agent(path, None, overrides, device)
    actions = ActionSpace.from_config(cfg.market)
    choices: list[torch.Tensor] = []
    p_greedy: list[torch.Tensor] = []
    p_uniform: list[torch.Tensor] = []

    def act(obs: Observation, state: Any) -> tuple[torch.Tensor, Any]:
        logits, state = agent_logits(model, obs, state)
        choice = logits.argmax(-1)
        probs = torch.softmax(logits.float(), -1)  # masked actions have -inf logits: probability 0
        choices.append(choice)
        p_greedy.append(probs.gather(-1, choice.unsqueeze(-1)).squeeze(-1))
        p_uniform.append(1.0 / obs.mask.sum(-1).float())
        return choice, state

    with torch.no_grad():
        result = walk("agent", act, model.initial_state(len(data.symbols), device), data, split, cfg, device)
    per = [underlying_metrics(result, s) for s in range(len(data.symbols))]
    chosen = Counter(torch.cat(choices).tolist())  # read back once, after the walk
    decisions = sum(chosen.values())
    greedy, uniform = (torch.cat(x).cpu().numpy() for x in (p_greedy, p_uniform))
    key = strict_json({"split": split, **{k: to_dict(getattr(cfg, k)) for k in ("data", "market", "env")}})
    if key not in rule_walks:
        rule_walks[key] = walk_family(data, split, cfg, device)
    rule, corr = closest_rule(result, rule_walks[key])
    return {
        "checkpoint": path,
        "return": float(np.mean([m["total_return"] for m in per])),
        "sharpe_excess": float(np.mean([m["sharpe_excess"] for m in per])),
        "trades": int(sum(m["trades"] for m in per)),
        "walk": fingerprint(result.equity, 2),  # to the cent
        "top_actions": {actions.describe(a): n / decisions for a, n in chosen.most_common(TOP)},
        "p_greedy": float(np.median(greedy)),
        "p_uniform": float(np.median(uniform)),
        "sure": float(np.mean(greedy > SURE)),
        "closest_rule": rule,
        "rule_corr": corr,
    }


def closest_rule(result: WalkResult, rules: dict[str, WalkResult]) -> tuple[str | None, float | None]:
    """The rule whose daily returns (every underlying's, end to end) correlate most with ``result``'s, and that
    correlation; (None, None) where no correlation is defined (a walk, or every rule, whose daily return never
    changes)."""
    mine = result.daily_returns.ravel()
    if mine.std() == 0:
        return None, None
    corr = {name: float(np.corrcoef(mine, w.daily_returns.ravel())[0, 1]) for name, w in rules.items()
            if w.daily_returns.std() > 0}
    corr = {name: c for name, c in corr.items() if np.isfinite(c)}
    if not corr:  # no rule's returns move: nothing to correlate with
        return None, None
    best = max(corr, key=corr.get)
    return best, corr[best]


def table_row(row: dict[str, Any]) -> dict[str, Any]:
    """A census as one table line: the action mix folded into one column."""
    mix = ", ".join(f"{name} {share:.0%}" for name, share in row["top_actions"].items())
    return {k: v for k, v in row.items() if k != "top_actions"} | {"top_actions": mix}


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
    device = pick_device(args.device)
    rule_walks: dict[str, dict[str, WalkResult]] = {}
    rows = [census(path, args.split, args.overrides, device, rule_walks) for path in args.checkpoints]
    walks = Counter(r["walk"] for r in rows)
    print_table([table_row(r) for r in rows], False, {
        "split": args.split, "overrides": " ".join(args.overrides) or "none",
        "distinct walks": f"{len(walks)} of {len(rows)} (largest group {max(walks.values())})"})
    if args.json:
        print(strict_json({"rows": rows, "split": args.split, "overrides": args.overrides,
                           "distinct_walks": len(walks), "largest_group": max(walks.values())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
