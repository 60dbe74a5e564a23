"""The rule a ``scale`` agent multiplies (``agent.actions: scale``), from its words to the env's
plain numbers (``env/scaled.py``; docs/ENVIRONMENT.md, "Scaling a rule").

A run that leaves ``agent.scale_rule`` empty is given the best rule of ``prior.rules``' family on
its training years (``pretraining.rule_prior.pick_prior``), and its words are written into the run's
settings, so that evaluate, predict and a resume rebuild the same rule from the checkpoint alone.
"""

from __future__ import annotations

import torch

from clstm_ppo.backtest.conditional import conditional_family
from clstm_ppo.backtest.gates import ALWAYS, gate_series
from clstm_ppo.backtest.rules import GatedRule
from clstm_ppo.config import Config, ConfigError
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.env import ActionSpace
from clstm_ppo.env.scaled import ScaledRule


def rule_named(words: str, actions: ActionSpace) -> GatedRule:
    """The rule of the gated family (fixed rules under ``always`` included) whose
    words are ``words``."""
    for rule in conditional_family(actions):
        if rule.describe(actions) == words:
            return rule
    raise ConfigError(
        f"config: agent.scale_rule {words!r} is not a rule of this chain; give one in the words "
        "evaluate prints for best_rule or best_conditional_rule, e.g. 'sell put 0.95 x 30d, every "
        "free slot', or leave it empty for the training years' best"
    )


def scaled_rule(cfg: Config, data: MarketData, device: torch.device | str) -> ScaledRule | None:
    """The rule of ``cfg.agent.scale_rule`` with its gate read on ``data``'s bars (the env's, by
    flat row), or None for ``agent.actions: contracts``."""
    if cfg.agent.actions != "scale":
        return None
    if not cfg.agent.scale_rule:
        raise ConfigError(
            "config: agent.actions scale needs agent.scale_rule (a run fills it from the training "
            "years when it starts); give a rule's words"
        )
    actions = ActionSpace.from_config(cfg.market)
    gated = rule_named(cfg.agent.scale_rule, actions)
    rule = gated.rule
    gate = (
        None
        if gated.gate == ALWAYS
        else torch.as_tensor(
            gate_series(data, cfg.market)[gated.gate].reshape(-1), dtype=torch.bool, device=device
        )
    )
    return ScaledRule(
        name=cfg.agent.scale_rule,
        stock=0 if rule.stock is None else actions.stock(rule.stock),
        order=rule.order or 0,
        every_slot=rule.every_slot,
        gate=gate,
        multiples=tuple(float(k) for k in cfg.agent.scale_multiples),
    )
