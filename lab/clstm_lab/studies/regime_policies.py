"""Does the best fixed rule depend on the market's state? A fixed rule per regime of one signal, against best_rule.

best_rule (``backtest/rules.py``) is one rule for every day. If what an agent observes should move its decisions,
the simplest such move is to follow another rule of the same family when one signal is high: the regime is a signal
at a bar's close (``SIGNALS``: the underlying's implied volatility, the VIX for the S&P 500; the volatility risk
premium; or any of the agents' market features, realized volatility among them), cut at quantiles of its training
years. The regimes' rules are picked on the validation years, either as a walk picks them
(``pick_pair_walked``: every pair of rules walked as the switching policy it is) or each from its regime's own days
(``pick_per_regime``). The switching policy is walked as one policy, like any other: at each bar a copy acts as
its regime's rule (positions opened under the other rule stay until they close or expire; shares once bought are
held, as every rule holds them): ``backtest/conditional.py``'s ``switching_policy``, the one that walks the gated
rules of best_conditional_rule, so a regime pair is a member of the same rule family. Nothing here reads a bar
after the validation split to pick; the test walk is the
out-of-sample answer, and the same pick on a placebo regime (a random label per bar, in the same shares) says how
much of a gain picking per regime makes on noise alone.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from clstm_ppo.backtest.conditional import switching_policy
from clstm_ppo.backtest.report import excess_returns
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.rules import PICK_METRICS, PICK_SPLIT, FixedRule, rank_walks
from clstm_ppo.backtest.walk import walk_batched
from clstm_ppo.config import Config
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.features import FEATURE_NAMES
from clstm_ppo.env import ActionSpace

PICK_METRIC = PICK_METRICS[0]  # Sharpe over the T-bill: best_rule's own default
MIN_DAYS = 20  # a regime with fewer validation days than this gets no rule of its own (best_rule's)


# The regime's signal at a bar's close: implied volatility (the VIX; no agent observes it), the volatility risk
# premium (implied less realized: what an option seller is paid over what the index has been moving), or any of the
# agents' own market features (data/features.py) before normalisation, realized volatility among them.
SIGNALS = ("iv", "vrp", *FEATURE_NAMES)


def signal_values(data: MarketData, signal: str) -> np.ndarray:
    """(S, T) ``signal`` at each bar's close: a column of ``data.bars`` (iv), implied less realized volatility
    (vrp), or an agent feature's raw value."""
    if signal not in SIGNALS:
        raise ValueError(f"a regime signal is one of {', '.join(SIGNALS)}, not {signal!r}")
    if signal in ("iv", "vrp") and "iv" not in data.bars:
        raise ValueError(f"regimes by {signal} need an iv column in the data (for the S&P 500: the VIX)")
    if signal == "iv":
        return data.bars["iv"]
    if signal == "vrp":
        return data.bars["iv"] - data.bars["realized_vol"]
    return data.raw_features[:, :, data.feature_names.index(signal)]


def signal_cuts(data: MarketData, regimes: int, signal: str = "iv") -> np.ndarray:
    """(S, regimes - 1) the quantiles of each underlying's ``signal`` (``signal_values``) over its training-split
    bars that cut ``regimes`` equally full regimes there."""
    values = signal_values(data, signal)
    if regimes < 2:
        raise ValueError(f"regimes must be at least 2, got {regimes}")
    start, end = data.splits["train"]
    return np.quantile(values[:, start:end], np.arange(1, regimes) / regimes, axis=1).T


def signal_regimes(data: MarketData, regimes: int, signal: str = "iv") -> np.ndarray:
    """(S, T) int: each bar's regime 0..regimes-1 by the underlying's ``signal`` at its close against
    ``signal_cuts`` (a bar at a cut joins the lower side; regime 0 the lowest values)."""
    cuts, values = signal_cuts(data, regimes, signal), signal_values(data, signal)
    return np.stack([np.searchsorted(cuts[s], values[s], side="left") for s in range(len(values))])


def placebo_regimes(data: MarketData, regimes: int, seed: int) -> np.ndarray:
    """(S, T) int: a random regime per bar, each equally likely: a signal that carries no information."""
    return np.random.default_rng(seed).integers(0, regimes, size=data.bars["close"].shape)


def regime_sharpes(result: WalkResult, data: MarketData, regime: np.ndarray, regimes: int) -> np.ndarray:
    """(regimes,) the walk's annualised Sharpe over the T-bill on the days that start at a bar of each regime (the
    decision is made at that close), mean over underlyings; NaN for a regime with fewer than MIN_DAYS days."""
    bars = data.dates.get_indexer(result.dates)[:-1]  # the bar each daily return starts from
    out = np.full((len(result.symbols), regimes), math.nan)
    for s in range(len(result.symbols)):
        excess = excess_returns(result.equity[s], result.dates, result.rate[s])
        for g in range(regimes):
            days = excess[regime[s, bars] == g]
            if len(days) >= MIN_DAYS:
                std = days.std(ddof=1)
                out[s, g] = days.mean() / std * math.sqrt(result.clock.periods_per_year) if std > 0 else 0.0
    return out.mean(axis=0)


def pick_per_regime(walks: dict[str, WalkResult], data: MarketData, regime: np.ndarray, regimes: int,
                    fallback: int) -> list[int]:
    """Each regime's rule: the index (in ``walks``' order) of the best Sharpe on its days, the first of equal
    ones; ``fallback`` (best_rule's index) for a regime too short to score."""
    scores = np.stack([regime_sharpes(w, data, regime, regimes) for w in walks.values()])  # (rules, regimes)
    picks = []
    for g in range(regimes):
        column = scores[:, g]
        picks.append(fallback if np.isnan(column).all() else int(np.nanargmax(column)))
    return picks


def pick_pair_walked(rules: list[FixedRule], candidates: list[int], label: np.ndarray, data: MarketData, cfg: Config,
                     device: torch.device | str) -> list[int]:
    """Two regimes' rules as a walk picks them: of every pair (low-regime rule, high-regime rule) of ``candidates``
    (indices into ``rules``), the one whose switching walk over the validation years has the best Sharpe over the T-bill
    (the first of equal ones), path and all: positions opened under one rule live on into the other's bars."""
    actions = ActionSpace.from_config(cfg.market)
    pairs = [[i, j] for i in candidates for j in candidates]
    policy = switching_policy(rules, pairs, [label], [0] * len(pairs), actions, len(data.symbols),
                              cfg.env.max_positions, device)
    walks = walk_batched([f"{i},{j}" for i, j in pairs], *policy, data, PICK_SPLIT, cfg, device)
    return pairs[rank_walks(walks, PICK_METRIC)[1][0]]
