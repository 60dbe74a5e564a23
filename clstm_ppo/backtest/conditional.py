"""Conditional rules: the fixed rules of ``backtest/rules.py`` gated on the option market's state,
and the best of them picked on the validation split, ``best_conditional_rule`` (docs/BACKTEST.md,
"Conditional rules").

The family is every unconditional rule (gate ``always``: ``best_rule``'s family, so the pick is
never worse on validation than best_rule) and every rule that places an option order under each of
the other gates of ``backtest/gates.py``. A gated rule is a switch between two fixed rules: the rule
itself while its gate is open, and the rule's shares alone while it is shut. ``switching_policy``
walks any such switch by a per-bar label; the regime study (``studies/regime_policies.py``) walks
its per-regime rules with it too: one rule family.
"""

from __future__ import annotations

import numpy as np
import torch

from clstm_ppo.backtest.gates import ALWAYS, GATES, gate_series
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.rules import (
    PICK_METRICS,
    PICK_SPLIT,
    FixedRule,
    GatedRule,
    RulePick,
    follow_rules,
    pick_from_walks,
    rule_family,
)
from clstm_ppo.backtest.walk import Policy, walk_batched
from clstm_ppo.config import Config
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.env import ActionSpace, Observation

LABEL = "best_conditional_rule"


def conditional_family(actions: ActionSpace) -> list[GatedRule]:
    """Every rule of ``rule_family`` ungated (``always``, in its order), then each rule with
    an option order under each other gate, gate by gate: a rule without options is the same
    rule under any gate."""
    rules = rule_family(actions)
    gated = [
        GatedRule(rule, gate)
        for gate in GATES
        if gate != ALWAYS
        for rule in rules
        if rule.order is not None
    ]
    return [GatedRule(rule, ALWAYS) for rule in rules] + gated


def switching_policy(
    rules: list[FixedRule],
    choices: list[list[int]],
    labels: list[np.ndarray],
    label_of_walk: list[int],
    actions: ActionSpace,
    n_symbols: int,
    max_positions: int,
    device: torch.device | str,
) -> tuple[Policy, None]:
    """One policy for ``len(choices)`` walks at once (``walk_batched``'s layout: copies p*S..p*S+S-1
    are walk p): walk p's copy follows ``rules[choices[p][g]]`` at a bar labelled g by
    ``labels[label_of_walk[p]]`` ((S, T) ints, each bar's label known at its close). Positions
    opened under one rule live on under the other."""
    follow = follow_rules(rules, actions, max_positions, device)
    walk_of_copy = torch.arange(len(choices), device=device).repeat_interleave(n_symbols)
    table = torch.tensor(choices, dtype=torch.long, device=device)  # (walks, labels)
    label_of_copy = torch.tensor(label_of_walk, dtype=torch.long, device=device)[walk_of_copy]
    label_of_row = torch.stack(
        [torch.as_tensor(np.asarray(r).reshape(-1), dtype=torch.long) for r in labels]
    )
    label_of_row = label_of_row.to(device)

    def act(obs: Observation, state: None) -> tuple[torch.Tensor, None]:
        # the label at the copy's current bar (row = s * T + t)
        label = label_of_row[label_of_copy, obs.row]
        return follow(obs, table[walk_of_copy, label]), state

    return act, None


def gated_policy(
    gated: list[GatedRule],
    gates: dict[str, np.ndarray],
    actions: ActionSpace,
    n_symbols: int,
    max_positions: int,
    device: torch.device | str,
) -> tuple[Policy, None]:
    """One policy walking every rule of ``gated`` at once, gate ``g`` open at bar t of underlying s
    where ``gates[g][s, t]``: label 1 follows the rule, label 0 the rule's shares alone."""
    names = list(gates)
    fixed = list(
        dict.fromkeys([*(g.rule for g in gated), *(FixedRule(g.rule.stock, None) for g in gated)])
    )
    index = {rule: k for k, rule in enumerate(fixed)}
    choices = [[index[FixedRule(g.rule.stock, None)], index[g.rule]] for g in gated]
    labels = [gates[name].astype(np.int64) for name in names]
    return switching_policy(
        fixed,
        choices,
        labels,
        [names.index(g.gate) for g in gated],
        actions,
        n_symbols,
        max_positions,
        device,
    )


def walk_gated(
    gated: list[GatedRule],
    gates: dict[str, np.ndarray],
    data: MarketData,
    split: str,
    cfg: Config,
    device: torch.device | str,
) -> dict[str, WalkResult]:
    """Every rule of ``gated`` walked over ``split`` at once, keyed by its ``describe`` (in
    the list's order)."""
    actions = ActionSpace.from_config(cfg.market)
    policy = gated_policy(gated, gates, actions, len(data.symbols), cfg.env.max_positions, device)
    return walk_batched([g.describe(actions) for g in gated], *policy, data, split, cfg, device)


def pick_conditional_rule(
    data: MarketData,
    cfg: Config,
    device: torch.device | str,
    metric: str = "sharpe_excess",
    split: str = PICK_SPLIT,
) -> RulePick:
    """Walk every rule of ``conditional_family`` over ``split`` (validation: nothing after it
    is read, and every gate reads bars up to its own) and keep the best by ``metric``, the
    first of equal ones."""
    if metric not in PICK_METRICS:
        raise ValueError(f"a rule is picked by one of {', '.join(PICK_METRICS)}, not {metric!r}")
    family = conditional_family(ActionSpace.from_config(cfg.market))
    walks = walk_gated(family, gate_series(data, cfg.market), data, split, cfg, device)
    return pick_from_walks(family, walks, data, metric, split, LABEL)


def conditional_policy(
    pick: RulePick, data: MarketData, cfg: Config, device: torch.device | str
) -> tuple:
    """The picked gated rule as a policy for one walk (``walk_together``'s layout)."""
    actions = ActionSpace.from_config(cfg.market)
    return gated_policy(
        [pick.rule],
        gate_series(data, cfg.market),
        actions,
        len(data.symbols),
        cfg.env.max_positions,
        device,
    )
