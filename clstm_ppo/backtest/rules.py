"""Fixed rules made of the agent's own actions, and the best of them picked on the validation split:
the benchmark that says whether an agent adds anything to the rule its greedy walk turns out to be
(docs/RESULTS.md, "What the greedy agents do": the S&P 500 agents walk rules such as "sell the
30-day 1.05 call into every free slot").

A rule buys the underlying to one of ``market.stock_targets`` at its first fill and holds those
shares (not rebalanced), or holds none, and keeps placing one option order of the chain: into
every free slot, or only while no option is open (one at a time, rolled when it expires). Every
combination is a rule, "hold cash" included. ``pick_rule`` walks them all on the validation
split, one vectorised policy over one env, and keeps the best by a report metric (Sharpe over the
T-bill unless told otherwise); evaluate then walks that rule on the split it reports, beside the
agent, whose checkpoint was picked on the same validation years. Nothing here reads a bar after
the validation split.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from clstm_ppo.backtest.gates import ALWAYS, WORDS
from clstm_ppo.backtest.policies import OPEN_SHARE
from clstm_ppo.backtest.report import excess_returns, underlying_metrics
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.statistics import deflated_sharpe
from clstm_ppo.backtest.walk import Policy, walk_batched
from clstm_ppo.config import Config
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.env import PORTFOLIO_FEATURES, ActionSpace, Observation

STOCK_SHARE = PORTFOLIO_FEATURES.index("stock_share")
PICK_SPLIT = "validation"
# Report metrics a rule may be picked by: higher is better for each, and "hold cash" scores no
# better than it earns. Sharpe over 0, Sortino and Calmar are not among them: cash's returns vary
# only with the bill's rate and the calendar, so over 0 its ratios are huge (Sharpe ~14, Calmar ~300
# on the S&P 500's 2013-15) and cash wins.
PICK_METRICS = ("sharpe_excess", "annual_return", "total_return")
SHOWN = 5  # the best rules the report lists with their validation scores


@dataclass(frozen=True)
class FixedRule:
    # index into market.stock_targets, bought at the first fill and held; None: no shares
    stock: int | None
    order: int | None  # the option action (1..option_orders) it keeps placing; None: no options
    every_slot: bool = True  # into every free slot; False: only while no option is open

    def describe(self, actions: ActionSpace) -> str:
        """Words for the rule, e.g. 'underlying to 100% + sell call 1.05 x 30d, every free slot'."""
        parts = [] if self.stock is None else [actions.describe(actions.stock(self.stock))]
        if self.order is not None:
            parts.append(
                f"{actions.describe(self.order)}, "
                f"{'every free slot' if self.every_slot else 'one at a time'}"
            )
        return " + ".join(parts) or "hold cash"


@dataclass(frozen=True)
class GatedRule:
    """A fixed rule followed only while a gate (``backtest/gates.py``) is open; while it is shut the
    copy places no option order and keeps only the rule's shares (cash or the underlying), its open
    options running on."""

    rule: FixedRule
    gate: str  # a key of gates.GATES

    def describe(self, actions: ActionSpace) -> str:
        """The rule's words, then the gate's: '... every free slot, while implied vol is
        above realized vol'."""
        base = self.rule.describe(actions)
        return (
            base
            if self.gate == ALWAYS
            else f"{base}, while {WORDS.get(self.gate, self.gate.replace('_', ' '))}"
        )


@dataclass(frozen=True)
class RulePick:
    rule: FixedRule | GatedRule
    name: str  # ``rule.describe``
    metric: str  # what it was picked by, on the validation split
    score: float  # its validation value of ``metric`` (mean over underlyings)
    walked: str  # the dates it was picked on, 'YYYY-MM-DD..YYYY-MM-DD'
    best: list[dict]  # the SHOWN best rules and their scores, best first
    tried: int  # how many rules were walked
    # the split it was picked on: validation for best_rule, train for a prior
    split: str = PICK_SPLIT
    label: str = "best_rule"  # or best_conditional_rule (backtest/conditional.py)
    # the pick's deflated Sharpe against the best of ``tried`` skill-less rules
    deflated: dict | None = None

    def line(self, split: str) -> str:
        """One line for the report: which rule, picked where and by what, and whether
        ``split`` is in sample."""
        note = " (in sample: the split walked here)" if split == self.split else ""
        kind = "fixed rules" if self.label == "best_rule" else "fixed and gated rules"
        deflated = (
            f", deflated Sharpe {self.deflated['deflated_sharpe']:.2f}" if self.deflated else ""
        )
        return (
            f"{self.label}: {self.name}, the best {self.metric} ({self.score:.3f}) of {self.tried} "
            f"{kind} on {self.split} {self.walked}{deflated}{note}"
        )

    def as_dict(self) -> dict:
        return {
            "rule": self.name,
            "picked_by": self.metric,
            "on": f"{self.split} {self.walked}",
            "score": self.score,
            "tried": self.tried,
            "best": self.best,
            "deflated_sharpe": self.deflated,
        }


def rule_family(actions: ActionSpace) -> list[FixedRule]:
    """Every rule: no shares or each positive stock target, times no option or each option order
    placed into every free slot or one at a time. Simpler rules first (the pick keeps the first
    of equal scores)."""
    stocks = [None] + [k for k, target in enumerate(actions.stock_targets) if target > 0]
    orders = [(None, True)] + [
        (o, every) for every in (True, False) for o in range(1, actions.option_orders + 1)
    ]
    return [FixedRule(stock, order, every) for stock in stocks for order, every in orders]


def rules_policy(
    rules: list[FixedRule],
    actions: ActionSpace,
    n_symbols: int,
    max_positions: int,
    device: torch.device | str,
) -> tuple[Policy, None]:
    """One policy acting for every rule at once: copies p*S..p*S+S-1 follow ``rules[p]``
    (``walk_batched``'s layout; with one rule, any S copies), each acting at a bar as
    ``follow_rules`` says."""
    follow = follow_rules(rules, actions, max_positions, device)
    rule_of_copy = torch.arange(len(rules), device=device).repeat_interleave(n_symbols)
    return (lambda obs, state: (follow(obs, rule_of_copy), state)), None


def follow_rules(
    rules: list[FixedRule], actions: ActionSpace, max_positions: int, device: torch.device | str
) -> Callable[[Observation, torch.Tensor], torch.Tensor]:
    """``(obs, k) -> action``: each copy i acts as ``rules[k[i]]`` would at this bar: the stock
    target while the rule wants shares and holds none, else its option order where the mask allows
    it (and, one at a time, no option is open), else hold. A copy may follow another rule at each
    bar (``studies/regime_policies.py``)."""

    def per_rule(values: list[int | bool], dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=device)

    stocks = per_rule([0 if r.stock is None else actions.stock(r.stock) for r in rules], torch.long)
    orders = per_rule([r.order or 0 for r in rules], torch.long)
    every_slots = per_rule([r.every_slot for r in rules], torch.bool)

    def act(obs: Observation, k: torch.Tensor) -> torch.Tensor:
        stock, order, every_slot = stocks[k], orders[k], every_slots[k]
        allowed = lambda action: obs.mask.gather(1, action.unsqueeze(-1)).squeeze(-1)  # noqa: E731
        buy_stock = (stock > 0) & (obs.portfolio[:, STOCK_SHARE] <= 0) & allowed(stock)
        flat = (obs.portfolio[:, OPEN_SHARE] * max_positions).round() == 0
        place = (order > 0) & allowed(order) & (every_slot | flat)
        return torch.where(buy_stock, stock, torch.where(place, order, actions.hold))

    return act


def walk_family(
    data: MarketData, split: str, cfg: Config, device: torch.device | str
) -> dict[str, WalkResult]:
    """Every rule of ``rule_family`` walked over ``split`` at once, keyed by its ``describe``
    (in family order)."""
    actions = ActionSpace.from_config(cfg.market)
    rules = rule_family(actions)
    policy = rules_policy(rules, actions, len(data.symbols), cfg.env.max_positions, device)
    return walk_batched(
        [rule.describe(actions) for rule in rules], *policy, data, split, cfg, device
    )


def rank_walks(walks: dict[str, WalkResult], metric: str) -> tuple[list[float], list[int]]:
    """Each walk's ``metric`` (the mean over underlyings of the report's value), and the walks'
    indices best first (the first of equal ones; NaN last)."""
    scores = [
        float(np.mean([underlying_metrics(w, s)[metric] for s in range(len(w.symbols))]))
        for w in walks.values()
    ]
    order = sorted(
        range(len(scores)), key=lambda i: (-scores[i] if math.isfinite(scores[i]) else math.inf, i)
    )
    return scores, order


def pick_rule(
    data: MarketData,
    cfg: Config,
    device: torch.device | str,
    metric: str = "sharpe_excess",
    split: str = PICK_SPLIT,
) -> RulePick:
    """Walk every rule of ``rule_family`` over ``split`` (validation for best_rule, train for a
    policy's prior) and keep the best by ``metric`` (the mean over underlyings of the report's
    value; the first of equal ones)."""
    if metric not in PICK_METRICS:
        raise ValueError(f"a rule is picked by one of {', '.join(PICK_METRICS)}, not {metric!r}")
    rules = rule_family(ActionSpace.from_config(cfg.market))
    return pick_from_walks(
        rules, walk_family(data, split, cfg, device), data, metric, split, "best_rule"
    )


def family_deflated_sharpe(walks: dict[str, WalkResult], best: int) -> dict[str, float]:
    """The deflated Sharpe (over the T-bill, per bar) of walk ``best`` as the best of every
    walk of ``walks`` (Bailey and Lopez de Prado 2014): each walk's bar returns are the mean
    over its underlyings."""
    excess = [
        np.mean(
            [excess_returns(w.equity[s], w.dates, w.rate[s]) for s in range(len(w.symbols))], axis=0
        )
        for w in walks.values()
    ]
    sharpes = [float(r.mean() / r.std(ddof=1)) if r.std(ddof=1) > 0 else 0.0 for r in excess]
    variance = float(np.var(sharpes, ddof=1)) if len(sharpes) > 1 else 0.0
    return deflated_sharpe(excess[best], len(excess), variance)


def pick_from_walks(
    rules: list, walks: dict[str, WalkResult], data: MarketData, metric: str, split: str, label: str
) -> RulePick:
    """The best of ``walks`` (``rules[i]`` walked as the i-th) by ``metric``, the
    first of equal ones."""
    names = list(walks)
    scores, order = rank_walks(walks, metric)
    start, end = data.split_dates(split)
    return RulePick(
        rules[order[0]],
        names[order[0]],
        metric,
        scores[order[0]],
        f"{start.date()}..{end.date()}",
        [{"rule": names[i], metric: scores[i]} for i in order[:SHOWN]],
        len(rules),
        split,
        label,
        family_deflated_sharpe(walks, order[0]),
    )
