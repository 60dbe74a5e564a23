"""Orders at a fill (bar t+1's open, or its close after a stale open): which positions close,
closing them, bringing the underlying to its target, and opening an option into a free slot.

Functions of the spec and a working copy of the state (``env/state.py``): they rebind the state's
fields and change no tensor in place, and nothing here has a data-dependent shape or syncs the host.
Prices, spreads and fees come from ``clstm_ppo.market``; the per-bar chain from ``env/quotes.py``;
the cash that orders may spend and the booking of closes from ``env/accounting.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from clstm_ppo.env.accounting import book_closes, cash_room, free_cover
from clstm_ppo.env.quotes import at_rows, ticks_of
from clstm_ppo.env.sizing import smallest, units, whole
from clstm_ppo.env.state import EnvSpec, EnvState
from clstm_ppo.market import bs_price, order_fill
from clstm_ppo.market.costs import (
    fees_only,
    fill_price_at,
    order_fill_at,
    round_trip_fees_per_contract,
    share_fees,
    share_price_with_fees,
    side_quote,
    strike_volume,
)
from clstm_ppo.market.flags import as_float
from clstm_ppo.market.volatility import ATM_YEARS, DAYS_PER_YEAR, surface_iv


def first_slot(spec: EnvSpec, flags: Tensor) -> tuple[Tensor, Tensor]:
    """(P, N) one-hot of each copy's first flagged slot (all False where none is) and
    (N,) whether any is."""
    ranked = spec.slot_rank * as_float(flags, spec.dtype)
    top = ranked.amax(0)
    return flags & (ranked == top), top > 0  # argmax over a short leading dim is slow on CPU


def slots_to_close(
    spec: EnvSpec, s: EnvState, action: Tensor, margin_call: Tensor, fill_row: Tensor
) -> Tensor:
    """(P, N) the slots that close at ``fill_row``'s fill: every one on turbulence at t or
    close-all, the worst or best by P&L when chosen, every short on a margin call (t's close left
    the shorts' margin uncovered)."""
    a = spec.actions
    by_pnl = (action == a.close_worst) | (action == a.close_best)
    # The worst position has the lowest P&L, the best the lowest
    # negated P&L: one search serves both.
    negate = 1.0 - 2.0 * as_float(action == a.close_best, spec.dtype)
    key = ((s.mark - s.entry_cost) * negate).masked_fill(~s.active, float("inf"))
    picked, _ = first_slot(spec, s.active & (key == key.amin(0)))
    close_all = spec.turbulent_bar.index_select(0, s.t) | (action == a.close_all)
    # A position that expires at this very fill (a close fill on its expiry
    # bar) settles at intrinsic instead.
    return (
        s.active
        & (close_all | (picked & by_pnl) | (margin_call & s.short))
        & (s.expiry_time > at_rows(spec.quotes.fill_time, fill_row))
    )


def close_options(spec: EnvSpec, s: EnvState, close: Tensor, row: Tensor, fill_row: Tensor) -> None:
    """Close the ``close`` slots at ``fill_row``'s fill (t+1): longs sell at the bid, shorts buy
    back at the ask, with the option volume known at ``row`` (t).

    Sync-free (compiled, on a GPU): every slot of every copy is priced, closing or not; a slot
    that does not close trades zero contracts, which costs nothing and moves no cash. Eager on a
    CPU (``spec.gather_closes``), where a host sync costs nothing, only the copies that close
    are priced (about a quarter under random actions; a sixth of the step's time): the same
    formulas on fewer columns.
    """
    if not spec.gather_closes:
        gross, cash_in, costs = _close_fills(spec, s, close, row, fill_row, lambda x: x)
        s.stats["traded"] = s.stats["traded"] + gross.sum(0)
        book_closes(spec, s, close, cash_in, costs)
        return
    # any over slots; bool any() is slow
    closers = close.view(torch.uint8).amax(0).nonzero().squeeze(-1)
    if closers.numel() == 0:
        return
    gross, cash_in, costs = _close_fills(
        spec, s, close, row, fill_row, lambda x: x.index_select(-1, closers)
    )
    s.stats["traded"] = s.stats["traded"].index_add(0, closers, gross.sum(0))
    flows = torch.zeros_like(s.mark).index_copy_(1, closers, cash_in)
    book_closes(
        spec, s, close, flows, torch.zeros_like(s.costs_paid).index_copy_(1, closers, costs)
    )


def _close_fills(
    spec: EnvSpec,
    s: EnvState,
    close: Tensor,
    row: Tensor,
    fill_row: Tensor,
    pick: Callable[[Tensor], Tensor],
) -> tuple[Tensor, Tensor, Tensor]:
    """(gross $ traded, cash in, costs by kind) of closing the ``close`` slots of the copies
    ``pick`` selects: (P, n), (P, n), (K, n)."""
    m, q = spec.market, spec.quotes
    fill_at, sym, strike = pick(fill_row), pick(s.sym), pick(s.strike)
    contracts = pick(s.contracts) * as_float(pick(close), spec.dtype)
    spot = at_rows(q.fill_px, fill_at)
    log_k_s = torch.log(strike / spot)
    years = (pick(s.expiry_time) - at_rows(q.fill_time, fill_at)).clamp_min(0) / DAYS_PER_YEAR
    iv = surface_iv(
        at_rows(q.fill_iv, fill_at), q.long_run_iv.index_select(0, sym), log_k_s, years, m
    )
    mid = bs_price(
        spot,
        strike,
        years,
        at_rows(q.fill_rate, fill_at),
        q.dividend_yield.index_select(0, sym),
        iv,
        pick(s.is_call),
        -log_k_s,
    )
    volume = strike_volume(at_rows(q.base_volume, pick(row)), log_k_s, years, m.costs, ATM_YEARS)
    selling = 1.0 - as_float(pick(s.short), spec.dtype)  # a long is sold, a short is bought back
    fill = order_fill(
        mid, contracts, selling, iv, log_k_s, volume, m.costs, m.multiplier, ticks_of(q, sym)
    )
    gross = fill.price * contracts * m.multiplier
    cash_in = gross * (2.0 * selling - 1.0) - fees_only(fill)  # zero in slots that do not close
    return gross, cash_in, fill.costs.sum(1)


def trade_shares(
    spec: EnvSpec,
    s: EnvState,
    action: Tensor,
    close_all: Tensor,
    turbulent: Tensor,
    fill_row: Tensor,
    size: Tensor | None = None,
) -> None:
    """Bring the underlying to the chosen share of equity (at t's close) at ``fill_row``'s fill
    price, in whole or fractional shares (``market.sizing``), buying only with the cash room;
    close-all sells every share. Never short: a negative equity targets none. A fractional change
    under the dust limit is no trade. ``size`` (N,): each target times this multiple
    (``agent.actions: scale``)."""
    a, costs = spec.actions, spec.market.costs
    if not a.stock_targets:
        return
    dtype = spec.dtype
    pick = (action - a.first_stock).clamp(0, len(a.stock_targets) - 1)
    targets = spec.stock_targets.index_select(0, pick)
    if size is not None:
        targets = targets * size
    choosing = (action >= a.first_stock) & (action < a.close_all)
    price = at_rows(spec.quotes.fill_px, fill_row)
    wanted = (
        units(spec, targets * s.equity.clamp_min(0) / price)
        * as_float(choosing, dtype)  # others keep theirs
        + s.shares * as_float(~choosing, dtype)
    ) * as_float(~close_all, dtype)
    # The cash room caps a purchase; a turbulent bar allows none (a lower
    # target can buy if the price fell).
    most = s.shares + units(
        spec, (cash_room(spec, s) / share_price_with_fees(price, costs)).clamp_min(0)
    ) * as_float(~turbulent, dtype)
    change = torch.minimum(wanted, most) - s.shares
    if not whole(spec):  # dust is no trade, but close-all sells every share
        change = change * as_float(
            (change.abs() >= smallest(spec, s.equity, price)) | close_all, dtype
        )
    notional = change.abs() * price
    fees = share_fees(notional, costs)
    s.cash = s.cash - change * price - fees
    s.costs_paid = s.costs_paid + fees * spec.share_cost_row
    s.stats["traded"] = s.stats["traded"] + notional
    s.shares = s.shares + change


def open_option(
    spec: EnvSpec,
    s: EnvState,
    action: Tensor,
    fill_row: Tensor,
    fill_bar: Tensor,
    size: Tensor | None = None,
) -> None:
    """Open an option at ``fill_row``'s fill (bar ``fill_bar``) into each ordering copy's first free
    slot: bought at the ask for position_frac of equity, or sold at the bid for position_frac of
    equity in margin; with ``env.max_order_notional``, at most that multiple of equity in notional
    at the fill's spot. Whole contracts (floored, at least one) or fractional ones
    (``market.sizing``; at least the dust limit). ``size`` (N,): each order that multiple of its
    position_frac and of the covered calls it may sell (``agent.actions: scale``)."""
    cfg, costs, mult, grid = (
        spec.cfg,
        spec.market.costs,
        spec.market.multiplier,
        spec.actions.grid_size,
    )
    ordering = (action >= 1) & (action <= spec.actions.option_orders)
    order = (action - 1).clamp(0, spec.actions.option_orders - 1)
    selling = order >= 2 * grid
    quote_index = order - 2 * grid * selling  # calls then puts, as in the action space
    is_call = quote_index < grid
    g = quote_index - grid * (~is_call)
    q, sell = spec.quotes, as_float(selling, spec.dtype)
    mid, half = (
        at_rows(q.fill_mid, fill_row, quote_index),
        at_rows(q.fill_half_spread, fill_row, quote_index),
    )
    strike, opt_volume = at_rows(q.fill_strike, fill_row, g), at_rows(q.fill_volume, fill_row, g)
    margin = at_rows(q.fill_margin, fill_row, quote_index) * mult  # $ per contract sold
    fees = round_trip_fees_per_contract(costs)
    # Size: position_frac of equity in premium (a buy) or in margin (a sale), at most
    # max_order_notional of equity in notional and max_volume_share of the strike's volume; then as
    # many as the cash room carries after the closing-fee reserves and the margin.
    ticks = ticks_of(q, s.sym)
    quote = side_quote(mid, sell, half, ticks)  # on the grid once, for the three pricings below
    # A buy is sized at the ask of one whole contract (its slippage in), or of none
    # (fractional: one contract is no fixed amount of money, so its slippage would make the
    # size depend on the price level).
    first = (
        fill_price_at(mid, 1.0 if whole(spec) else 0.0, sell, half, opt_volume, costs, ticks, quote)
        * mult
    )
    per_unit = torch.lerp(first, margin, sell).clamp_min(1e-12)
    # Shares not yet covering a short call cover new call sales, which then need no margin
    # (a covered call): those contracts are sold whatever position_frac says, as a
    # buy-write covers its whole holding.
    covered = free_cover(spec, s) * as_float(selling & is_call, spec.dtype)
    budget = cfg.position_frac * s.equity
    if size is not None:
        # more than the shares held can cover is a naked sale, sized by position_frac alone
        budget, covered = budget * size, covered * size.clamp(max=1.0)
    by_equity = units(spec, budget / per_unit)
    spot_notional = (at_rows(q.fill_px, fill_row) * mult).clamp_min(1e-12)  # one contract's
    if cfg.max_order_notional > 0:  # a setting, not a tensor: no branch in the compiled graph
        by_equity = torch.minimum(
            by_equity, units(spec, cfg.max_order_notional * s.equity / spot_notional)
        )
    wanted = torch.minimum(
        torch.maximum(by_equity, covered), units(spec, costs.max_volume_share * opt_volume)
    )
    # more slippage
    price = fill_price_at(mid, wanted, sell, half, opt_volume, costs, ticks, quote) * mult
    need = torch.lerp(price, margin - price, sell) + fees  # cash room one (naked) contract takes
    affordable = covered + units(spec, (cash_room(spec, s) / need.clamp_min(1e-12)).clamp_min(0))
    contracts = torch.minimum(wanted, affordable)
    slot, has_slot = first_slot(spec, ~s.active)
    go = ordering & (contracts >= smallest(spec, s.equity, spot_notional)) & has_slot
    s.stats["rejected"] = s.stats["rejected"] + (ordering & ~go)
    contracts = contracts * as_float(go, spec.dtype)
    fill = order_fill_at(mid, contracts, sell, half, opt_volume, costs, mult, ticks, quote)
    premium = fill.price * contracts * mult
    # a sale brings the premium in, less its fees
    paid = premium * (1.0 - 2.0 * sell) + fees_only(fill)
    s.stats["traded"] = s.stats["traded"] + premium
    s.cash = s.cash - paid
    s.costs_paid = s.costs_paid + fill.costs
    _fill_slot(
        spec,
        s,
        slot & go,
        is_call,
        selling,
        contracts,
        paid,
        strike,
        fill_bar * q.expiry_bar.shape[1] + g,
    )
    if spec.slot_pnl:
        s.slot_opened = s.slot_opened | (slot & go)


def _fill_slot(
    spec: EnvSpec,
    s: EnvState,
    here: Tensor,
    is_call: Tensor,
    selling: Tensor,
    contracts: Tensor,
    paid: Tensor,
    strike: Tensor,
    expiry_at: Tensor,
) -> None:
    """Write the new positions into the (P, N) one-hot slots ``here`` (no sync, no scatter);
    ``expiry_at`` is the fill bar's flat index into the (T, G) expiry tables."""
    q = spec.quotes
    s.active = s.active | here
    s.is_call = (s.is_call & ~here) | (here & is_call)
    s.short = (s.short & ~here) | (here & selling)
    # The slot was empty (no contracts, no cost): adding fills it; lerp with 0/1 weights is exact.
    into = as_float(here, spec.dtype)
    s.contracts, s.entry_cost = s.contracts + into * contracts, s.entry_cost + into * paid
    s.strike = torch.lerp(s.strike, strike.expand_as(s.strike), into)
    s.expiry_bar = torch.lerp(s.expiry_bar, q.expiry_bar.view(-1).index_select(0, expiry_at), into)
    s.expiry_time = torch.lerp(
        s.expiry_time, q.expiry_time.view(-1).index_select(0, expiry_at), into
    )
