"""Orders at a fill (bar t+1's open, or its close after a stale open): which positions close, closing them,
bringing the underlying to its target, and opening an option into a free slot.

Functions over a ``BatchedOptionsEnv``'s state tensors, updated in place on the env. Prices, spreads and
fees come from ``clstm_ppo.market``; the per-bar chain from ``env/quotes.py``; the cash that orders may
spend and the booking of closes from ``env/accounting.py``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from clstm_ppo.env.accounting import book_closes, cash_room, free_cover
from clstm_ppo.env.quotes import at_rows
from clstm_ppo.market import COST_KINDS, bs_price, order_fill
from clstm_ppo.market.costs import (
    fees_only,
    fill_price_at,
    order_fill_at,
    round_trip_fees_per_contract,
    share_fees,
    share_price_with_fees,
    strike_volume,
)
from clstm_ppo.market.flags import as_float
from clstm_ppo.market.volatility import ATM_YEARS, DAYS_PER_YEAR, surface_iv

if TYPE_CHECKING:
    from clstm_ppo.env.options_env import BatchedOptionsEnv


def first_slot(env: BatchedOptionsEnv, flags: Tensor) -> tuple[Tensor, Tensor]:
    """(P, N) one-hot of each copy's first flagged slot (all False where none is) and (N,) whether any is."""
    ranked = env.slot_rank * as_float(flags, env.dtype)
    top = ranked.amax(0)
    return flags & (ranked == top), top > 0  # argmax over a short leading dim is slow on CPU


def slots_to_close(env: BatchedOptionsEnv, action: Tensor, margin_call: Tensor, fill_row: Tensor) -> Tensor:
    """(P, N) the slots that close at ``fill_row``'s fill: every one on turbulence at t or close-all, the worst
    or best by P&L when chosen, every short on a margin call (t's close left the shorts' margin uncovered)."""
    a = env.actions
    by_pnl = (action == a.close_worst) | (action == a.close_best)
    # The worst position has the lowest P&L, the best the lowest negated P&L: one search serves both.
    negate = 1.0 - 2.0 * as_float(action == a.close_best, env.dtype)
    key = ((env.mark - env.entry_cost) * negate).masked_fill(~env.active, float("inf"))
    picked, _ = first_slot(env, env.active & (key == key.amin(0)))
    close_all = env.turbulent_bar.index_select(0, env.t) | (action == a.close_all)
    # A position that expires at this very fill (a close fill on its expiry bar) settles at intrinsic instead.
    return env.active & (close_all | (picked & by_pnl) | (margin_call & env.short)) \
        & (env.expiry_time > at_rows(env.quotes.fill_time, fill_row))


def close_options(env: BatchedOptionsEnv, close: Tensor, row: Tensor, fill_row: Tensor) -> None:
    """Close the ``close`` slots at ``fill_row``'s fill (t+1): longs sell at the bid, shorts buy back at the ask,
    with the option volume known at ``row`` (t).

    Only the copies that close are priced: most copies hold on most bars, and pricing every slot of
    every copy was a third of a step. Finding them is a host sync, on CPU free, on a GPU one more per step.
    """
    m, q = env.market_cfg, env.quotes
    closers = close.view(torch.uint8).amax(0).nonzero().squeeze(-1)  # any over slots; bool any() is slow
    if closers.numel() == 0:
        return
    pick = lambda x: x.index_select(-1, closers)  # noqa: E731
    fill_at, sym = pick(fill_row), pick(env.sym)
    strike, contracts = pick(env.strike), pick(env.contracts) * as_float(pick(close), env.dtype)
    spot = at_rows(q.fill_px, fill_at)
    log_k_s = torch.log(strike / spot)
    years = (pick(env.expiry_time) - at_rows(q.fill_time, fill_at)).clamp_min(0) / DAYS_PER_YEAR
    iv = surface_iv(at_rows(q.fill_iv, fill_at), q.long_run_iv.index_select(0, sym), log_k_s, years, m)
    mid = bs_price(spot, strike, years, at_rows(q.fill_rate, fill_at), q.dividend_yield.index_select(0, sym), iv,
                   pick(env.is_call), -log_k_s)
    volume = strike_volume(at_rows(q.base_volume, pick(row)), log_k_s, years, m.costs, ATM_YEARS)
    selling = 1.0 - as_float(pick(env.short), env.dtype)  # a long is sold, a short is bought back
    fill = order_fill(mid, contracts, selling, iv, log_k_s, volume, m.costs, m.multiplier)
    gross = fill.price * contracts * m.multiplier
    cash_in = gross * (2.0 * selling - 1.0) - fees_only(fill)  # zero in slots that do not close
    env.stats["traded"].index_add_(0, closers, gross.sum(0))
    flows = torch.zeros_like(env.mark).index_copy_(1, closers, cash_in)
    costs = torch.zeros_like(env.costs_paid).index_copy_(1, closers, fill.costs.sum(1))
    book_closes(env, close, flows, costs)


def trade_shares(env: BatchedOptionsEnv, action: Tensor, close_all: Tensor, turbulent: Tensor,
                 fill_row: Tensor) -> None:
    """Bring the underlying to the chosen share of equity (at t's close) at ``fill_row``'s fill price, in
    whole shares, buying only with the cash room; close-all sells every share. Never short: a negative
    equity targets none."""
    a, costs = env.actions, env.market_cfg.costs
    if not a.stock_targets:
        return
    dtype = env.dtype
    pick = (action - a.first_stock).clamp(0, len(a.stock_targets) - 1)
    targets = env.stock_targets.index_select(0, pick)
    choosing = (action >= a.first_stock) & (action < a.close_all)
    price = at_rows(env.quotes.fill_px, fill_row)
    wanted = (torch.floor(targets * env.equity.clamp_min(0) / price) * as_float(choosing, dtype)  # others keep theirs
              + env.shares * as_float(~choosing, dtype)) * as_float(~close_all, dtype)
    # The cash room caps a purchase; a turbulent bar allows none (a lower target can buy if the price fell).
    most = env.shares + torch.floor((cash_room(env) / share_price_with_fees(price, costs)).clamp_min(0)) \
        * as_float(~turbulent, dtype)
    change = torch.minimum(wanted, most) - env.shares
    notional = change.abs() * price
    fees = share_fees(notional, costs)
    env.cash = env.cash - change * price - fees
    env.costs_paid[COST_KINDS.index("shares")] += fees
    env.stats["traded"] += notional
    env.shares = env.shares + change


def open_option(env: BatchedOptionsEnv, action: Tensor, fill_row: Tensor, fill_bar: Tensor) -> None:
    """Open an option at ``fill_row``'s fill (bar ``fill_bar``) into each ordering copy's first free slot:
    bought at the ask for position_frac of equity, or sold at the bid for position_frac of equity in margin."""
    cfg, costs, mult, grid = env.cfg, env.market_cfg.costs, env.market_cfg.multiplier, env.actions.grid_size
    ordering = (action >= 1) & (action <= env.actions.option_orders)
    order = (action - 1).clamp(0, env.actions.option_orders - 1)
    selling = order >= 2 * grid
    quote_index = order - 2 * grid * selling  # calls then puts, as in the action space
    is_call = quote_index < grid
    g = quote_index - grid * (~is_call)
    q, sell = env.quotes, as_float(selling, env.dtype)
    mid, half = at_rows(q.fill_mid, fill_row, quote_index), at_rows(q.fill_half_spread, fill_row, quote_index)
    strike, opt_volume = at_rows(q.fill_strike, fill_row, g), at_rows(q.fill_volume, fill_row, g)
    margin = at_rows(q.fill_margin, fill_row, quote_index) * mult  # $ per contract sold
    fees = round_trip_fees_per_contract(costs)
    # Size: position_frac of equity in premium (a buy) or in margin (a sale), at most max_volume_share of the
    # strike's volume; then as many as the cash room carries after the closing-fee reserves and the margin.
    first = fill_price_at(mid, 1.0, sell, half, opt_volume, costs) * mult
    per_unit = torch.lerp(first, margin, sell).clamp_min(1e-12)
    # Shares not yet covering a short call cover new call sales, which then need no margin (a covered call):
    # those contracts are sold whatever position_frac says, as a buy-write covers its whole holding.
    covered = free_cover(env) * as_float(selling & is_call, env.dtype)
    wanted = torch.minimum(torch.maximum(torch.floor(cfg.position_frac * env.equity / per_unit), covered),
                           torch.floor(costs.max_volume_share * opt_volume))
    price = fill_price_at(mid, wanted, sell, half, opt_volume, costs) * mult  # more contracts: more slippage
    need = torch.lerp(price, margin - price, sell) + fees  # cash room one (naked) contract takes
    affordable = covered + torch.floor((cash_room(env) / need.clamp_min(1e-12)).clamp_min(0))
    contracts = torch.minimum(wanted, affordable)
    slot, has_slot = first_slot(env, ~env.active)
    go = ordering & (contracts >= 1) & has_slot
    env.stats["rejected"] += ordering & ~go
    contracts = contracts * as_float(go, env.dtype)
    fill = order_fill_at(mid, contracts, sell, half, opt_volume, costs, mult)
    premium = fill.price * contracts * mult
    paid = premium * (1.0 - 2.0 * sell) + fees_only(fill)  # a sale brings the premium in, less its fees
    env.stats["traded"] += premium
    env.cash = env.cash - paid
    env.costs_paid += fill.costs
    _fill_slot(env, slot & go, is_call, selling, contracts, paid, strike, fill_bar * q.expiry_bar.shape[1] + g)


def _fill_slot(env: BatchedOptionsEnv, here: Tensor, is_call: Tensor, selling: Tensor, contracts: Tensor,
               paid: Tensor, strike: Tensor, expiry_at: Tensor) -> None:
    """Write the new positions into the (P, N) one-hot slots ``here`` (no sync, no scatter); ``expiry_at`` is
    the fill bar's flat index into the (T, G) expiry tables."""
    q = env.quotes
    env.active = env.active | here
    env.is_call = (env.is_call & ~here) | (here & is_call)
    env.short = (env.short & ~here) | (here & selling)
    # The slot was empty (no contracts, no cost): adding fills it; lerp with 0/1 weights is exact.
    into = as_float(here, env.dtype)
    env.contracts, env.entry_cost = env.contracts + into * contracts, env.entry_cost + into * paid
    env.strike = torch.lerp(env.strike, strike.expand_as(env.strike), into)
    env.expiry_bar = torch.lerp(env.expiry_bar, q.expiry_bar.view(-1).index_select(0, expiry_at), into)
    env.expiry_time = torch.lerp(env.expiry_time, q.expiry_time.view(-1).index_select(0, expiry_at), into)
