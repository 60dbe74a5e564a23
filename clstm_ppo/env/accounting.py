"""The account between orders: interest and dividends, booking closed and expired positions, marking
the book at a close (equity, the shorts' margin, the Greeks), and the cash a new order may spend.

Functions of the spec and a working copy of the state (``env/state.py``): they rebind the state's
fields and change no tensor in place. docs/MARKET.md states the rules. Orders themselves are in
``env/orders.py``, the per-bar market tables in ``env/quotes.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from clstm_ppo.env.quotes import at_rows
from clstm_ppo.env.sizing import COVER_ROUNDING, units
from clstm_ppo.env.state import EnvSpec, EnvState
from clstm_ppo.market import closing_fee_reserve
from clstm_ppo.market.black_scholes import bs_greeks_before_expiry
from clstm_ppo.market.costs import round_trip_order_minimum
from clstm_ppo.market.flags import as_float, call_sign
from clstm_ppo.market.margin import short_margin
from clstm_ppo.market.volatility import DAYS_PER_YEAR, surface_iv


def side(spec: EnvSpec, s: EnvState) -> Tensor:
    """(P, N) +1 for long slots, -1 for short ones."""
    return 1.0 - 2.0 * as_float(s.short, spec.dtype)


def carry_years(spec: EnvSpec, bar: Tensor, next_bar: Tensor) -> Tensor:
    """(N,) calendar years from ``bar``'s close to ``next_bar``'s: what cash interest and
    dividends accrue over."""
    close_time = spec.quotes.close_time
    return (close_time.index_select(0, next_bar) - close_time.index_select(0, bar)) / DAYS_PER_YEAR


def tbill_return(spec: EnvSpec, row: Tensor, bar: Tensor, next_bar: Tensor) -> Tensor:
    """(N,) what cash earns from ``bar``'s close (flat ``row``) to ``next_bar``'s: the rate known at
    ``bar`` over the years between, the growth ``accrue_carry`` pays cash, less 1."""
    return torch.expm1(at_rows(spec.quotes.rate_close, row) * carry_years(spec, bar, next_bar))


def accrue_carry(spec: EnvSpec, s: EnvState, row: Tensor, next_bar: Tensor) -> None:
    """From t's close (flat ``row``) to ``next_bar``'s close cash earns the rate known at t, and the
    shares held earn the underlying's dividends."""
    q = spec.quotes
    years = carry_years(spec, s.t, next_bar)
    dividend = torch.expm1(q.dividend_yield.index_select(0, s.sym) * years) * at_rows(
        q.close_px, row
    )
    s.cash = s.cash * torch.exp(at_rows(q.rate_close, row) * years) + s.shares * dividend


def book_closes(
    spec: EnvSpec, s: EnvState, closing: Tensor, cash_in: Tensor, costs: Tensor | None
) -> None:
    """Settle ``closing`` slots (``cash_in`` is zero elsewhere, negative for a short bought back or
    settled): cash in, P&L net of every cost, slot freed."""
    s.cash = s.cash + cash_in.sum(0)
    if spec.slot_pnl:
        # what the position realised, net of every cost; its last mark was taken
        # off at the step's start
        realised = (cash_in - s.entry_cost) * as_float(closing, spec.dtype)
        s.slot_pnl = torch.stack([s.slot_pnl[0] + realised, s.slot_pnl[1]])
    s.stats["closed"] = s.stats["closed"] + closing.sum(0)
    s.stats["wins"] = s.stats["wins"] + (closing & (cash_in > s.entry_cost)).sum(0)
    s.stats["option_pnl"] = s.stats["option_pnl"] + (
        (cash_in - s.entry_cost) * as_float(closing, spec.dtype)
    ).sum(0)
    if costs is not None:
        s.costs_paid = s.costs_paid + costs
    s.active = s.active & ~closing
    keep = as_float(~closing, spec.dtype)
    s.contracts, s.entry_cost = s.contracts * keep, s.entry_cost * keep


def settle_expiries(spec: EnvSpec, s: EnvState, spot_close: Tensor, bar: Tensor) -> None:
    """Every position that expires on ``bar``'s trading date settles at intrinsic value at its close
    (``spot_close``); no fees: an expiry is no order."""
    expired = s.active & (s.expiry_bar <= bar.to(spec.dtype))
    intrinsic = ((spot_close - s.strike) * call_sign(s.is_call, spec.dtype)).clamp_min(0)
    settled = (
        intrinsic
        * (s.contracts * as_float(expired, spec.dtype) * side(spec, s))
        * spec.market.multiplier
    )
    book_closes(spec, s, expired, settled, None)


def mark_to_market(spec: EnvSpec, s: EnvState, spot: Tensor, row: Tensor) -> None:
    """Mark every open position at flat ``row``'s close (after expiries, so every open one has time
    left), and the equity, the shorts' margin and the book's Greeks at that close."""
    m, q = spec.market, spec.quotes
    log_k_s = torch.log(s.strike / spot)
    years = (s.expiry_time - q.close_time.index_select(0, s.t)).clamp_min(0) / DAYS_PER_YEAR
    iv = surface_iv(
        at_rows(q.iv_close, row), q.long_run_iv.index_select(0, s.sym), log_k_s, years, m
    )
    g = bs_greeks_before_expiry(
        spot,
        s.strike,
        years,
        at_rows(q.rate_close, row),
        q.dividend_yield.index_select(0, s.sym),
        iv,
        s.is_call,
        -log_k_s,
    )
    size = s.contracts * m.multiplier * side(spec, s)  # zero in empty slots, negative for shorts
    s.mark = g.price * size
    stock = s.shares * spot
    s.equity = s.cash + s.mark.sum(0) + stock
    short_size = s.contracts * m.multiplier * as_float(s.short, spec.dtype)
    requirement = (
        short_margin(
            g.price,
            spot,
            s.strike,
            s.is_call,
            q.margin_a.index_select(0, s.sym),
            q.margin_b.index_select(0, s.sym),
        )
        * short_size
    )
    # Shares cover short calls share for share (a covered call needs no margin).
    calls = as_float(s.is_call, spec.dtype)
    call_size = (short_size * calls).sum(0)
    # Fractional counts round: shares within a billionth of the calls' cover
    # them all (no margin call on dust).
    covered = (s.shares / call_size.clamp_min(1e-12)).clamp(max=1.0)
    covered = covered.masked_fill(covered >= 1.0 - COVER_ROUNDING, 1.0)
    call_margin = (requirement * calls).sum(0)
    s.margin = requirement.sum(0) - covered * call_margin
    s.greeks = torch.stack(
        [
            (g.delta * size).sum(0) * spot
            + stock,  # $ change per 100% move (the underlying's delta is 1)
            (g.gamma * size).sum(0)
            * spot
            * spot
            * 1e-4,  # $ change in delta-$ per 1% move, squared
            (g.vega * size).sum(0) * 0.01,  # $ per vol point
            (g.theta * size).sum(0) / DAYS_PER_YEAR,  # $ per calendar day
        ]
    )


def cash_room(spec: EnvSpec, s: EnvState) -> Tensor:
    """(N,) cash a new order may spend: what is left after the shorts' margin, every open position's
    closing-fee reserve and the per-order commission minimums of opening and later closing it."""
    costs = spec.market.costs
    reserve = closing_fee_reserve(s.contracts, costs).sum(0)  # zero for empty slots
    return s.cash - s.margin - reserve - round_trip_order_minimum(costs)


def free_cover(spec: EnvSpec, s: EnvState) -> Tensor:
    """(N,) call contracts the shares could still cover: shares not already under a short call, per
    100 (whole contracts, or fractional ones: ``market.sizing``)."""
    multiplier = spec.market.multiplier
    short_calls = (s.contracts * as_float(s.short & s.is_call, spec.dtype)).sum(0) * multiplier
    return units(spec, ((s.shares - short_calls) / multiplier).clamp_min(0))
