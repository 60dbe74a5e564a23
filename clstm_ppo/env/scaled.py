"""The ``scale`` action mode (``agent.actions: scale``): the agent chooses a multiple of one fixed
rule's order instead of an order of the chain (docs/ENVIRONMENT.md, "Scaling a rule").

At each bar the rule decides as it does when walked alone (buy its shares while it holds none, else
place its option order where the mask allows it, into every free slot or only while no option is
open, and only while its gate is open); the agent picks a multiple k of ``agent.scale_multiples``
and the env places k times that order: k x position_frac of equity in premium or margin, k x the
rule's share target. At 1x on every bar the copy walks exactly the rule; at 0x it places nothing.
Where the rule places nothing the choice cannot matter, so the mask offers 1x alone there: the
decision has one outcome, and PPO's gradient through it is zero.

The rule is plain numbers here (its actions in the chain's action space and a per-bar gate), so the
env reads no backtest module; ``backtest/scaled_rules.py`` turns a rule's words into one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from clstm_ppo.config import AgentConfig, MarketConfig
from clstm_ppo.env.actions import ActionSpace
from clstm_ppo.env.observation import PORTFOLIO_FEATURES

OPEN_SHARE = PORTFOLIO_FEATURES.index("open_share")
STOCK_SHARE = PORTFOLIO_FEATURES.index("stock_share")


@dataclass(frozen=True, eq=False)
class ScaledRule:
    """The rule whose orders a ``scale`` agent multiplies, and the multiples it chooses among."""

    name: str  # the rule's words, as best_rule prints them
    stock: int  # the stock action it takes at its first fill (0: it holds no shares)
    order: int  # the option action it keeps placing (0: none)
    every_slot: bool  # into every free slot; False: only while no option is open
    # (S * T,) bool by flat row: the rule places its option order where open; None: always
    gate: Tensor | None
    multiples: tuple[float, ...]  # agent.scale_multiples; 1 among them

    @property
    def one(self) -> int:
        """The index of 1x: the rule as it is, and the only choice where the rule places nothing."""
        return self.multiples.index(1.0)


class ScaleChoices:
    """What a ``scale`` agent chooses among, with the interface of ``ActionSpace`` that agents read
    (``n``, ``describe``)."""

    def __init__(self, rule: ScaledRule):
        self.rule = rule
        self.n = len(rule.multiples)

    def describe(self, choice: int) -> str:
        return f"{self.rule.multiples[choice]:g}x {self.rule.name}"


def rule_orders(
    rule: ScaledRule,
    actions: ActionSpace,
    max_positions: int,
    mask: Tensor,
    portfolio: Tensor,
    row: Tensor,
) -> Tensor:
    """(N,) the chain action the rule takes at each copy's bar (hold where it places nothing), from
    the chain's ``mask`` (N, A), the ``portfolio`` features (N, F) and the flat ``row`` (N,) of the
    bar: as ``backtest.rules.follow_rules`` decides for a rule walked alone."""
    hold = torch.full_like(row, actions.hold)
    columns = torch.arange(mask.shape[-1], device=mask.device)
    # A reduction, not a column read: inductor's CPU code for one bool column of a mask built by
    # slices fails to compile (torch 2.13: a VecMask<int> and a VecMask<float> in one select)
    allowed = lambda action: (mask & (columns == action)).any(-1)  # noqa: E731
    chosen = hold
    if rule.order:
        flat = (portfolio[:, OPEN_SHARE] * max_positions).round() == 0
        place = allowed(rule.order) & (flat | rule.every_slot)
        if rule.gate is not None:
            place = place & rule.gate.index_select(0, row)
        chosen = torch.where(place, torch.full_like(row, rule.order), chosen)
    if rule.stock:
        buy_stock = (portfolio[:, STOCK_SHARE] <= 0) & allowed(rule.stock)
        chosen = torch.where(buy_stock, torch.full_like(row, rule.stock), chosen)
    return chosen


def choice_mask(rule: ScaledRule, orders: Tensor, hold: int) -> Tensor:
    """(N, M) the multiples a copy may choose: all where the rule places an order,
    1x alone elsewhere."""
    ordering = (orders != hold).unsqueeze(-1)
    one = torch.arange(len(rule.multiples), device=orders.device) == rule.one
    return ordering | one


def multiples_of(rule: ScaledRule, choice: Tensor, dtype: torch.dtype) -> Tensor:
    """(N,) the multiple each copy chose."""
    return torch.tensor(rule.multiples, dtype=dtype, device=choice.device).index_select(0, choice)


def agent_choices(agent: AgentConfig, market: MarketConfig) -> int:
    """How many actions an agent of these settings chooses among: the chain's, or
    ``agent.scale_multiples``."""
    return (
        len(agent.scale_multiples)
        if agent.actions == "scale"
        else ActionSpace.from_config(market).n
    )
