"""The account between orders: interest and dividends, booking closed and expired positions, marking the
book at a close (equity, the shorts' margin, the Greeks), and the cash a new order may spend.

Functions over a ``BatchedOptionsEnv``'s state tensors, updated in place on the env; docs/MARKET.md states
the rules. Orders themselves are in ``env/orders.py``, the per-bar market tables in ``env/quotes.py``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from clstm_ppo.env.quotes import at_rows
from clstm_ppo.market import closing_fee_reserve
from clstm_ppo.market.black_scholes import bs_greeks_before_expiry
from clstm_ppo.market.costs import round_trip_order_minimum
from clstm_ppo.market.flags import as_float, call_sign
from clstm_ppo.market.margin import short_margin
from clstm_ppo.market.volatility import DAYS_PER_YEAR, surface_iv

if TYPE_CHECKING:
    from clstm_ppo.env.options_env import BatchedOptionsEnv


def side(env: BatchedOptionsEnv) -> Tensor:
    """(P, N) +1 for long slots, -1 for short ones."""
    return 1.0 - 2.0 * as_float(env.short, env.dtype)


def accrue_carry(env: BatchedOptionsEnv, row: Tensor, next_bar: Tensor) -> None:
    """From t's close (flat ``row``) to ``next_bar``'s close cash earns the rate known at t, and the shares
    held earn the underlying's dividends."""
    q = env.quotes
    years = (q.close_time.index_select(0, next_bar) - q.close_time.index_select(0, env.t)) / DAYS_PER_YEAR
    dividend = torch.expm1(q.dividend_yield.index_select(0, env.sym) * years) * at_rows(q.close_px, row)
    env.cash = env.cash * torch.exp(at_rows(q.rate_close, row) * years) + env.shares * dividend


def book_closes(env: BatchedOptionsEnv, closing: Tensor, cash_in: Tensor, costs: Tensor | None) -> None:
    """Settle ``closing`` slots (``cash_in`` is zero elsewhere, negative for a short bought back or settled):
    cash in, P&L net of every cost, slot freed."""
    env.cash = env.cash + cash_in.sum(0)
    env.stats["closed"] += closing.sum(0)
    env.stats["wins"] += (closing & (cash_in > env.entry_cost)).sum(0)
    if costs is not None:
        env.costs_paid += costs
    env.active = env.active & ~closing
    keep = as_float(~closing, env.dtype)
    env.contracts, env.entry_cost = env.contracts * keep, env.entry_cost * keep


def settle_expiries(env: BatchedOptionsEnv, spot_close: Tensor, bar: Tensor) -> None:
    """Every position that expires on ``bar``'s trading date settles at intrinsic value at its close
    (``spot_close``); no fees: an expiry is no order."""
    expired = env.active & (env.expiry_bar <= bar.to(env.dtype))
    intrinsic = ((spot_close - env.strike) * call_sign(env.is_call, env.dtype)).clamp_min(0)
    settled = intrinsic * (env.contracts * as_float(expired, env.dtype) * side(env)) * env.market_cfg.multiplier
    book_closes(env, expired, settled, None)


def mark_to_market(env: BatchedOptionsEnv, spot: Tensor, row: Tensor) -> None:
    """Mark every open position at flat ``row``'s close (after expiries, so every open one has time left),
    and the equity, the shorts' margin and the book's Greeks at that close."""
    m, q = env.market_cfg, env.quotes
    log_k_s = torch.log(env.strike / spot)
    years = (env.expiry_time - q.close_time.index_select(0, env.t)).clamp_min(0) / DAYS_PER_YEAR
    iv = surface_iv(at_rows(q.iv_close, row), q.long_run_iv.index_select(0, env.sym), log_k_s, years, m)
    g = bs_greeks_before_expiry(spot, env.strike, years, at_rows(q.rate_close, row),
                                q.dividend_yield.index_select(0, env.sym), iv, env.is_call, -log_k_s)
    size = env.contracts * m.multiplier * side(env)  # zero in empty slots, negative for shorts
    env.mark = g.price * size
    stock = env.shares * spot
    env.equity = env.cash + env.mark.sum(0) + stock
    short_size = env.contracts * m.multiplier * as_float(env.short, env.dtype)
    requirement = short_margin(g.price, spot, env.strike, env.is_call, q.margin_a.index_select(0, env.sym),
                               q.margin_b.index_select(0, env.sym)) * short_size
    # Shares cover short calls share for share (a covered call needs no margin).
    calls = as_float(env.is_call, env.dtype)
    call_size = (short_size * calls).sum(0)
    covered = (env.shares / call_size.clamp_min(1e-12)).clamp(max=1.0)
    call_margin = (requirement * calls).sum(0)
    env.margin = requirement.sum(0) - covered * call_margin
    env.greeks = torch.stack([
        (g.delta * size).sum(0) * spot + stock,  # $ change per 100% move (the underlying's delta is 1)
        (g.gamma * size).sum(0) * spot * spot * 1e-4,  # $ change in delta-$ per 1% move, squared
        (g.vega * size).sum(0) * 0.01,  # $ per vol point
        (g.theta * size).sum(0) / DAYS_PER_YEAR,  # $ per calendar day
    ])


def cash_room(env: BatchedOptionsEnv) -> Tensor:
    """(N,) cash a new order may spend: what is left after the shorts' margin, every open position's
    closing-fee reserve and the per-order commission minimums of opening and later closing it."""
    costs = env.market_cfg.costs
    reserve = closing_fee_reserve(env.contracts, costs).sum(0)  # zero for empty slots
    return env.cash - env.margin - reserve - round_trip_order_minimum(costs)


def free_cover(env: BatchedOptionsEnv) -> Tensor:
    """(N,) call contracts the shares could still cover: shares not already under a short call, per 100."""
    multiplier = env.market_cfg.multiplier
    short_calls = (env.contracts * as_float(env.short & env.is_call, env.dtype)).sum(0) * multiplier
    return torch.floor(((env.shares - short_calls) / multiplier).clamp_min(0))
