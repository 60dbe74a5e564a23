"""The env step as a pure function: ``step(spec, state, action) -> StepOutput``
(docs/ENVIRONMENT.md).

Timing (no look-ahead): the observation at bar t uses data up to t's close; the action chosen from
it fills at bar t+1's open; positions then age to t+1's close, expire there at intrinsic value, and
are marked at mid. The reward is the change in marked equity (every cost already inside it, counted
once), or with ``env.reward`` that change less the underlying's, or the differential Sharpe ratio of
the bar's return (``sharpe.py``).

No host sync, no data-dependent shape, no Python branch on a tensor's value: ended copies restart
by blending fresh values into every copy's fields, and their episode figures are summed on the
device. So the same code runs eager on a CPU, compiled (``compiled_step``) as one graph, and
captured in a CUDA graph. ``BatchedOptionsEnv``, the backtest walk and the gymnasium wrapper are
shells over these functions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from clstm_ppo.device import compile_graph
from clstm_ppo.env.accounting import accrue_carry, mark_to_market, settle_expiries, tbill_return
from clstm_ppo.env.draws import integers_of, start_hash, uniform, uniform_of
from clstm_ppo.env.episodes import add_finished
from clstm_ppo.env.observation import portfolio_features, valid_actions
from clstm_ppo.env.orders import close_options, open_option, slots_to_close, trade_shares
from clstm_ppo.env.quotes import at_rows
from clstm_ppo.env.scaled import choice_mask, multiples_of, rule_orders
from clstm_ppo.env.sharpe import dsr_reward, prior_variance
from clstm_ppo.env.state import EnvSpec, EnvState, flat_row
from clstm_ppo.market.flags import as_float
from clstm_ppo.market.volatility import DAYS_PER_YEAR


class StepOutput(NamedTuple):
    state: EnvState  # after auto-reset: ended copies are at their new episode's first bar
    portfolio: Tensor  # (N, len(PORTFOLIO_FEATURES)) float32, at the state's bar
    row: Tensor  # (N,) flat index sym * T + t of the state's bar
    start: Tensor  # (N,) bool: the state's bar begins an episode
    reward: Tensor  # (N,)
    terminated: Tensor  # (N,) bool: ruin
    truncated: Tensor  # (N,) bool: episode length or split end reached
    # with ``keep_ended``: the state before the restart, where ended copies' figures are
    ended: EnvState | None


def step(
    spec: EnvSpec, state: EnvState, action: Tensor, autoreset: bool = True, keep_ended: bool = False
) -> StepOutput:
    """Fill ``action`` at t+1, settle and mark at t+1's close, sum the ended episodes, restart
    them (with ``autoreset``) and observe. ``state`` is not changed. ``keep_ended`` also
    returns the state before the restart (free: no tensor is changed in place, so it is only
    kept, never copied)."""
    s = state.working_copy()
    reward, terminated, truncated = advance(spec, s, action)
    done = terminated | truncated
    add_finished(spec, s, done)
    ended = s.working_copy() if keep_ended else None
    if autoreset:
        restart(spec, s, done)
    observe(spec, s)
    return StepOutput(
        s,
        portfolio_features(spec, s),
        flat_row(spec, s),
        s.t == s.t_start,
        reward,
        terminated,
        truncated,
        ended,
    )


def compiled_step(
    spec: EnvSpec, autoreset: bool = True, keep_ended: bool = False, cuda_graphs: bool = False
) -> Callable[[EnvState, Tensor], StepOutput]:
    """``step`` for ``spec`` as one compiled graph: no graph break (``fullgraph``) and fixed shapes,
    so a rollout compiles once (the spec's tensors and settings are constants of the graph).
    ``cuda_graphs``: replayed as a CUDA graph too (inductor's "reduce-overhead"); each call's
    outputs live until the next call."""
    dense = dataclasses.replace(spec, gather_closes=False)  # a graph has no host sync

    def bound(state: EnvState, action: Tensor) -> StepOutput:
        return step(dense, state, action, autoreset, keep_ended)

    return compile_graph(bound, "env step", cuda_graphs)


def advance(spec: EnvSpec, s: EnvState, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Rebind ``s`` to one bar on: orders filled at t+1's fill, positions settled and marked at its
    close. Returns (reward, terminated, truncated)."""
    cfg, q = spec.cfg, spec.quotes
    valid = s.mask.gather(1, action.unsqueeze(-1)).squeeze(-1)
    s.stats["invalid"] = s.stats["invalid"] + ~valid
    size = None
    if spec.scaled is None:
        action = action * valid  # a masked action is never executed: it becomes hold (0)
    else:
        # the rule's order at t's close, placed at the chosen multiple (a masked
        # choice places nothing)
        size = multiples_of(spec.scaled, action, spec.dtype) * as_float(valid, spec.dtype)
        action = scaled_orders(spec, s) * (size > 0)
    prev_equity = s.equity
    if spec.slot_pnl:
        # each slot's P&L starts from its position's last mark less its cost (0 where empty)
        s.slot_pnl = torch.stack([s.entry_cost - s.mark, torch.zeros_like(s.mark)])
        s.slot_opened = torch.zeros_like(s.active)
    now, t_next = flat_row(spec, s), s.t + 1
    prev_close = at_rows(q.close_px, now)
    nxt = now + 1
    # t's close left the shorts' margin uncovered
    margin_call = (s.cash < s.margin) & (s.margin > 0)
    s.stats["margin_calls"] = s.stats["margin_calls"] + margin_call

    # 0. From t's close to t+1's close cash earns interest and the shares their dividends.
    cash_return = tbill_return(spec, now, s.t, t_next) if cfg.reward == "dsr" else None
    accrue_carry(spec, s, now, t_next)
    # 1. Closes at t+1's fill (its open, or its close after a stale open): forced or chosen.
    close_options(spec, s, slots_to_close(spec, s, action, margin_call, nxt), now, nxt)
    # 2. The underlying to its target (all of it out on close-all; turbulence only stops it
    # growing), then an option order.
    trade_shares(
        spec,
        s,
        action,
        action == spec.actions.close_all,
        spec.turbulent_bar.index_select(0, s.t),
        nxt,
        size,
    )
    open_option(spec, s, action, nxt, t_next, size)
    # 3. At t+1's close: what expires on this trading date settles at
    # intrinsic, the rest is marked at mid.
    spot_close = at_rows(q.close_px, nxt)
    settle_expiries(spec, s, spot_close, t_next)
    s.t = t_next
    mark_to_market(spec, s, spot_close, nxt)
    if spec.slot_pnl:
        # a position still open adds its new mark less its cost: to its old owner, or as a new one's
        now_worth = (s.mark - s.entry_cost) * as_float(s.active, spec.dtype)
        opened = as_float(s.slot_opened, spec.dtype)
        s.slot_pnl = torch.stack([s.slot_pnl[0] + now_worth * (1.0 - opened), now_worth * opened])

    # 4. Reward, shaping, episode ends.
    if cfg.reward == "dsr":
        reward = dsr_reward(spec, s, prev_equity, cash_return)
    else:
        gain = s.equity - prev_equity
        if cfg.reward == "excess":
            # less what the same equity in the underlying made from t's close to t+1's
            gain = gain - prev_equity * index_return(
                spec, s.sym, t_next - 1, prev_close, spot_close
            )
        reward = gain * (cfg.reward_scale / cfg.initial_cash)
    s.peak = torch.maximum(s.peak, s.equity)
    if cfg.drawdown_penalty:
        reward = reward - cfg.drawdown_penalty * (1.0 - s.equity / s.peak)
    if cfg.turbulence_penalty:
        held = s.active.any(0) | (s.shares > 0)
        held_in_turbulence = spec.turbulent_bar.index_select(0, s.t) & held
        # in the env's dtype
        reward = reward - cfg.turbulence_penalty * as_float(held_in_turbulence, spec.dtype)
    s.stats["reward"] = s.stats["reward"] + reward
    terminated = s.equity < cfg.ruin_fraction * cfg.initial_cash
    truncated = (s.t >= s.t_end) & ~terminated
    return reward, terminated, truncated


def index_return(
    spec: EnvSpec, sym: Tensor, bar: Tensor, close: Tensor, next_close: Tensor
) -> Tensor:
    """(N,) the underlying's total return from ``bar``'s close (``close``) to the next bar's
    (``next_close``), its dividend yield paid over the bar as the account's shares are paid it
    (``accounting.accrue_carry``)."""
    q = spec.quotes
    years = (
        q.close_time.index_select(0, bar + 1) - q.close_time.index_select(0, bar)
    ) / DAYS_PER_YEAR
    return (next_close - close) / close + torch.expm1(q.dividend_yield.index_select(0, sym) * years)


def observe(spec: EnvSpec, s: EnvState) -> EnvState:
    """``s`` with the action mask judged at its bar's close (what the next step checks
    actions against): the chain's actions, or under ``agent.actions: scale`` the multiples
    the rule's order allows."""
    if spec.scaled is None:
        s.mask = valid_actions(spec, s)
    else:
        s.mask = choice_mask(spec.scaled, scaled_orders(spec, s), spec.actions.hold)
    return s


def scaled_orders(spec: EnvSpec, s: EnvState) -> Tensor:
    """(N,) the chain action ``spec.scaled``'s rule takes at each copy's bar,
    judged at its close."""
    return rule_orders(
        spec.scaled,
        spec.actions,
        spec.cfg.max_positions,
        valid_actions(spec, s),
        portfolio_features(spec, s),
        flat_row(spec, s),
    )


# ----------------------------------------------------------------------------------- episode starts


def blend(fresh: Tensor, new: Tensor | float, old: Tensor) -> Tensor:
    """``old`` with ``new`` in the copies flagged ``fresh`` (N,) (over the last dim), without a
    data-dependent shape. Floats blend by ``lerp`` with 0/1 weights (exact for finite values, and
    several times cheaper than ``where`` on a CPU), flags by logic, integers by ``where``."""
    if old.dtype == torch.bool:
        return (old & ~fresh) | (fresh & new)
    if old.is_floating_point():
        new = new if isinstance(new, Tensor) else torch.full_like(old, new)
        return torch.lerp(old, new.expand_as(old), as_float(fresh, old.dtype))
    return torch.where(fresh, new, old)


def clear_books(spec: EnvSpec, s: EnvState, fresh: Tensor) -> None:
    """Empty the ``fresh`` copies' books: initial cash, no positions, shares, costs or statistics
    (and under reward dsr, the Sharpe ratio moments back at their prior)."""
    cash = spec.cfg.initial_cash
    s.cash, s.equity, s.peak = (
        blend(fresh, cash, s.cash),
        blend(fresh, cash, s.equity),
        blend(fresh, cash, s.peak),
    )
    keep = as_float(~fresh, spec.dtype)
    s.shares, s.margin = s.shares * keep, s.margin * keep
    s.active, s.is_call, s.short = s.active & ~fresh, s.is_call & ~fresh, s.short & ~fresh
    # A stale strike stays (finite, > 0): every slot can be priced without masking its inputs.
    s.contracts, s.entry_cost, s.mark = s.contracts * keep, s.entry_cost * keep, s.mark * keep
    s.expiry_bar, s.expiry_time = s.expiry_bar * keep, s.expiry_time * keep
    s.greeks, s.costs_paid = s.greeks * keep, s.costs_paid * keep
    s.stats = {k: v * keep for k, v in s.stats.items()}
    if spec.cfg.reward == "dsr":
        # the moving moments start again from their prior: A = 0, B = the prior variance
        a, b = s.sharpe_moments[0], s.sharpe_moments[1]
        s.sharpe_moments = torch.stack(
            [blend(fresh, 0.0, a), blend(fresh, prior_variance(spec.cfg), b)]
        )


def restart(spec: EnvSpec, s: EnvState, fresh: Tensor) -> None:
    """Start the ``fresh`` copies afresh at random bars of random underlyings, each from
    its own next draw."""
    clear_books(spec, s, fresh)
    symbol, start = draw_starts(spec, s.key, s.draws)
    s.sym, s.t, s.t_start = (
        blend(fresh, symbol, s.sym),
        blend(fresh, start, s.t),
        blend(fresh, start, s.t_start),
    )
    s.t_end = blend(fresh, spec.episode_end(start), s.t_end)
    s.draws = s.draws + fresh.long()


def draw_starts(spec: EnvSpec, key: Tensor, draws: Tensor) -> tuple[Tensor, Tensor]:
    """(underlying, first bar) of the next episode of the copies with keys ``key`` that drew
    ``draws`` before."""
    base = start_hash(key, draws)  # shared by both streams
    if spec.symbol_cdf is None:
        symbol = integers_of(base, "symbol", 0, spec.n_symbols - 1)
    else:  # weighted: the first underlying whose cumulative share exceeds the draw
        symbol = torch.searchsorted(spec.symbol_cdf, uniform_of(base, "symbol"), right=True).clamp(
            max=spec.n_symbols - 1
        )
    return symbol, integers_of(base, "start", spec.first_bar, spec.latest_start)


def restart_at(spec: EnvSpec, s: EnvState, starts: Tensor) -> None:
    """Start every copy afresh at bar ``starts`` (N,), copy i on underlying i mod S, for a
    full-length episode."""
    every = torch.ones_like(s.t, dtype=torch.bool)
    clear_books(spec, s, every)
    s.sym = spec.copy_ids % spec.n_symbols
    s.t, s.t_start, s.t_end = starts, starts, spec.episode_end(starts)


def stagger(s: EnvState) -> None:
    """Cut every copy's episode to U{1..its full length} bars, from each copy's own draws (so a
    seed, and a checkpoint's state, still fix it): the copies then end, and restart, on different
    steps ever after, as far apart as a long run would have put them. The bars left (t_end - t) are
    then uniform, as at a random moment of full-length episodes. The cut episode is a real, shorter
    one: its progress feature runs 0..1 over its own bars, and it is not counted among full-length
    episodes (``episodes.full_length``)."""
    span = s.t_end - s.t_start
    u = uniform(s.key, s.draws, "stagger")
    s.t_end = s.t_start + torch.minimum((u * span).long() + 1, span)
