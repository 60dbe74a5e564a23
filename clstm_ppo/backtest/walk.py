"""A continuous, date-indexed walk over a whole split: one env copy per underlying from the
split's first bar to its last, deterministic, the same walk for the agent and every
benchmark (docs/BACKTEST.md).

The first bar is the split's first bar whose window is complete; the window may reach back into
earlier splits' bars, which are past. Nothing ends the walk early: no episode length, no ruin.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch

from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.config import Config
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.stale import market_stale_opens
from clstm_ppo.env import BatchedOptionsEnv, Observation
from clstm_ppo.env.scaled import ScaledRule
from clstm_ppo.market import COST_KINDS
from clstm_ppo.market.volatility import DAYS_PER_YEAR
from clstm_ppo.metrics import composite_score, max_drawdown, sharpe, sortino

Policy = Callable[[Observation, object], tuple[torch.Tensor, object]]


def walk_env(
    data: MarketData,
    split: str,
    cfg: Config,
    device: torch.device | str,
    walks: int = 1,
    scaled: ScaledRule | None = None,
) -> BatchedOptionsEnv:
    """The env of ``walks`` walks: one copy per underlying each, to the split's end, no ruin, no
    auto-reset, in float64 (a few copies cost nothing to keep exact, and float32 cents on $1M would
    blur a day's interest). ``scaled``: a ``scale`` agent's rule
    (``backtest.scaled_rules.scaled_rule``), whose multiples its copies take."""
    env_cfg = dataclasses.replace(cfg.env, episode_length=0, ruin_fraction=0.0, dtype="float64")
    return BatchedOptionsEnv(
        data,
        split,
        cfg.market,
        env_cfg,
        walks * len(data.symbols),
        device=device,
        seed=cfg.seed,
        autoreset=False,
        scaled=scaled,
    )


@torch.no_grad()
def walk(
    name: str,
    policy: Policy,
    state: object,
    data: MarketData,
    split: str,
    cfg: Config,
    device: torch.device | str,
    scaled: ScaledRule | None = None,
) -> WalkResult:
    """Walk ``policy`` (and its carried ``state``) over ``split``; copy s trades underlying s.

    Every copy ends at the split's last bar, unless its equity falls below zero (possible
    with shorts): that account stops there, and its equity stays at its last value for
    the rest of the walk.
    """
    return walk_together({name: (policy, state)}, data, split, cfg, device, scaled)[name]


@torch.no_grad()
def walk_together(
    policies: dict[str, tuple[Policy, object]],
    data: MarketData,
    split: str,
    cfg: Config,
    device: torch.device | str,
    scaled: ScaledRule | None = None,
) -> dict[str, WalkResult]:
    """Walk several policies over ``split`` in one env, each as ``walk`` walks it alone: the p-th
    policy trades copies p*S..p*S+S-1 (copy i on underlying i mod S). A walk's env draws nothing
    (its starts are given) and no copy reads another, so each result is the one a walk alone gives
    (a test checks it bit for bit), at one env step per bar for all of them: a batch-of-S eager step
    costs its launches, not its arithmetic."""
    n_symbols = len(data.symbols)

    def every_policy(
        obs: Observation, states: dict[str, object]
    ) -> tuple[torch.Tensor, dict[str, object]]:
        actions = []
        for p, (name, (policy, _)) in enumerate(policies.items()):
            action, states[name] = policy(
                obs.copies(p * n_symbols, (p + 1) * n_symbols), states[name]
            )
            actions.append(action)
        return torch.cat(actions), states

    states = {name: state for name, (_, state) in policies.items()}
    return walk_batched(list(policies), every_policy, states, data, split, cfg, device, scaled)


@torch.no_grad()
def walk_batched(
    names: list[str],
    policy: Policy,
    state: object,
    data: MarketData,
    split: str,
    cfg: Config,
    device: torch.device | str,
    scaled: ScaledRule | None = None,
) -> dict[str, WalkResult]:
    """Walk one policy that acts for ``len(names)`` walks at once (copies p*S..p*S+S-1 are walk
    ``names[p]``) over ``split``: a family of rules as one vectorised policy, without a Python
    call per rule a bar."""
    n_symbols = len(data.symbols)
    env = walk_env(data, split, cfg, device, walks=len(names), scaled=scaled)
    obs = env.reset(starts=torch.full((env.num_envs,), env.first_bar, dtype=torch.long))
    ends: dict[int, tuple[dict, int]] = {}  # copy -> (its episode statistics, their row)
    while len(ends) < env.num_envs:
        action, state = policy(obs, state)
        result = env.step(action)
        obs = result.obs
        if result.episodes is not None:
            for k, copy in enumerate(result.episodes["env"]):
                ends.setdefault(int(copy), (result.episodes, k))
    return {
        name: _result(
            name,
            [ends[p * n_symbols + s] for s in range(n_symbols)],
            data,
            env,
            cfg.env.ruin_fraction,
        )
        for p, name in enumerate(names)
    }


def _result(
    name: str,
    ends: list[tuple[dict, int]],
    data: MarketData,
    env: BatchedOptionsEnv,
    ruin_fraction: float,
) -> WalkResult:
    """One policy's walk from its copies' episode records, in underlying order."""
    first, last = env.first_bar, env.split_end - 1
    column = lambda key: np.array([episode[key][k] for episode, k in ends])  # noqa: E731
    curves = [np.asarray(episode["equity_curve"][k], dtype=np.float64) for episode, k in ends]
    equity = np.stack([np.pad(c, (0, last - first + 1 - len(c)), mode="edge") for c in curves])
    return WalkResult(
        policy=name,
        symbols=list(data.symbols),
        dates=data.dates[first : last + 1],
        equity=equity,
        rate=env.quotes.inputs.rate[:, first : last + 1],
        closed=column("closed"),
        wins=column("wins"),
        open_at_end=column("open"),
        traded=column("traded"),
        costs=column("costs").astype(np.float64),
        ruin_fraction=ruin_fraction,
        clock=data.clock,
        option_pnl=column("option_pnl"),
        masked=column("invalid"),
    )


def buy_and_hold(data: MarketData, split: str, cfg: Config) -> WalkResult:
    """The underlying itself, bought with the whole account at the walk's first fill (the next bar's
    open, or its close after a stale open) for ``market.costs.share_cost_bps`` of the notional, and
    held to the last close. Fractional shares, as an index fund holds. As in the env, cash earns the
    rate and the holding is paid the data's dividend yield in cash (0 where Adj Close put dividends
    into the prices)."""
    # for the walk's bounds, its clock, rates and dividend yields
    env = walk_env(data, split, cfg, "cpu")
    first, last = env.first_bar, env.split_end - 1
    q = env.quotes
    close = data.bars["close"][:, first : last + 1]
    rate = q.inputs.rate[:, first : last + 1]
    years = np.diff(q.close_time.cpu().numpy().astype(np.float64)[first : last + 1]) / DAYS_PER_YEAR
    fill = np.where(market_stale_opens(data), data.bars["close"], data.bars["open"])
    cash0 = cfg.env.initial_cash
    cost = cash0 * cfg.market.costs.share_cost_bps * 1e-4
    shares = (cash0 - cost) / fill[:, first + 1]
    dividend_yield = q.inputs.dividend_yield
    equity = np.empty_like(close)
    equity[:, 0] = cash0
    # the carry on the account until the fill, then all in
    cash = cash0 * np.exp(rate[:, 0] * years[0]) - cash0
    for i in range(1, close.shape[1]):
        if i > 1:
            cash = cash * np.exp(rate[:, i - 1] * years[i - 1]) + shares * close[
                :, i - 1
            ] * np.expm1(dividend_yield * years[i - 1])
        equity[:, i] = cash + shares * close[:, i]
    costs = np.zeros((len(data.symbols), len(COST_KINDS)))
    costs[:, COST_KINDS.index("shares")] = cost
    zeros = np.zeros(len(data.symbols))
    return WalkResult(
        policy="buy_and_hold",
        symbols=list(data.symbols),
        dates=data.dates[first : last + 1],
        equity=equity,
        rate=rate,
        closed=zeros,
        wins=zeros,
        open_at_end=np.ones(len(data.symbols)),
        traded=np.full(len(data.symbols), cash0),
        costs=costs,
        ruin_fraction=cfg.env.ruin_fraction,
        clock=data.clock,
    )


def selection_metrics(result: WalkResult) -> dict[str, float]:
    """The validation metrics training selects checkpoints on (BEST_METRICS and what the log
    shows), from one walk: per-underlying values averaged; profit rate is the share of underlyings
    that ended in profit."""
    equity = result.equity
    returns = result.daily_returns
    ret = equity[:, -1] - equity[:, 0]
    closed, wins = float(result.closed.sum()), float(result.wins.sum())
    win_rate = wins / closed if closed > 0 else 0.0
    profit_rate = float(np.mean(ret > 0))
    return_pct = float(np.mean(ret / equity[:, 0]) * 100.0)
    costs = result.costs.mean(axis=0)
    out = {
        "episodes": float(len(ret)),
        "return": float(ret.mean()),
        "return_pct": return_pct,
        "sharpe": float(np.mean([sharpe(r, result.clock.periods_per_year) for r in returns])),
        "sortino": float(np.mean([sortino(r, result.clock.periods_per_year) for r in returns])),
        "max_drawdown": float(np.mean([max_drawdown(e) for e in equity])),
        "closed": closed / len(ret),
        "open": float(result.open_at_end.mean()),
        "steps": float(returns.shape[1]),
        "win_rate": win_rate,
        "profit_rate": profit_rate,
        "composite": composite_score(win_rate, profit_rate, return_pct),
        "costs": float(costs.sum()),
    }
    out.update({f"cost_{kind}": float(costs[i]) for i, kind in enumerate(COST_KINDS)})
    return out
