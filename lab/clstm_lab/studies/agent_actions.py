"""What a trained agent does on its greedy walk: its action mix, how sure it is of each choice, its closest fixed
rule, and which checkpoints walk identically (scripts/studies/agent_actions.py prints it; docs/RESULTS.md reads it)."""
from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import torch

from clstm_lab.studies.across_runs import fingerprint
from clstm_ppo.agent.from_checkpoint import load_agent
from clstm_ppo.backtest.policies import agent_logits
from clstm_ppo.backtest.report import underlying_metrics
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.rules import walk_family
from clstm_ppo.backtest.scaled_rules import scaled_rule
from clstm_ppo.backtest.walk import walk
from clstm_ppo.config import to_dict
from clstm_ppo.env import ActionSpace, Observation
from clstm_ppo.env.scaled import ScaleChoices
from clstm_ppo.tables import strict_json

TOP = 3  # actions listed per checkpoint
SURE = 0.5  # a decision is sure where its action's probability exceeds this


def action_census(paths: list[str], split: str, overrides: list[str], device: torch.device) -> dict[str, Any]:
    """Every checkpoint's census (``census``) over ``split``, and how many distinct walks they make: what the
    command's ``--json`` prints."""
    rule_walks: dict[str, dict[str, WalkResult]] = {}
    rows = [census(path, split, overrides, device, rule_walks) for path in paths]
    walks = Counter(r["walk"] for r in rows)
    return {"rows": rows, "split": split, "overrides": overrides, "distinct_walks": len(walks),
            "largest_group": max(walks.values())}


def census(path: str, split: str, overrides: list[str], device: torch.device,
           rule_walks: dict[str, dict[str, WalkResult]]) -> dict[str, Any]:
    """One checkpoint's greedy walk over ``split``: its metrics, fingerprint, action statistics and closest fixed
    rule. ``rule_walks`` keeps the rules' walks of each market and split met so far (checkpoints of one fold share
    them)."""
    cfg, data, model = load_agent(path, None, overrides, device)
    scaled = scaled_rule(cfg, data, device)  # a scale agent chooses multiples of this rule's order
    actions = ActionSpace.from_config(cfg.market) if scaled is None else ScaleChoices(scaled)
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
        result = walk("agent", act, model.initial_state(len(data.symbols), device), data, split, cfg, device,
                      scaled)
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
