"""Everything the env reads per bar, as tensors on its device, built once: the market's
clock, the prices, vols and rates at each fill and close, expiries on trading dates, and
every bar's chain quoted once.

A chain depends on the bar, never on a copy's state, so quoting it here (not per step) keeps the
step cheap. docs/MARKET.md section 1 states the rules these tables follow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from clstm_ppo.config import MarketConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.market import bs_call_put, chain_strikes
from clstm_ppo.market.costs import (
    Ticks,
    base_option_volume,
    fill_price_at,
    half_spread,
    strike_volume,
    tick_sizes,
)
from clstm_ppo.market.inputs import MarketInputs, market_inputs
from clstm_ppo.market.margin import margin_rates, short_margin
from clstm_ppo.market.volatility import ATM_YEARS, DAYS_PER_YEAR, surface_iv

OPEN_TO_CLOSE_DAYS = 6.5 / 24.0  # a US session: the open comes 6.5 hours before the close


def at_rows(table: Tensor, row: Tensor, column: Tensor | None = None) -> Tensor:
    """``table[sym, t]`` (or ``table[sym, t, column]``) of an (S, T) or (S, T, C) table at
    flat rows sym * T + t.

    One index_select on the flattened table: several times faster than 2-D advanced indexing on CPU.
    """
    if column is None:
        return table.flatten(0, 1).index_select(0, row)
    return table.view(-1).index_select(0, row * table.shape[-1] + column)


def market_clock(dates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(close_time, open_time) of each bar in days since the first bar's timestamp (float64).

    A bar opens 6.5 hours before its close, or at the previous bar's close if that is
    nearer (intraday bars).
    """
    close_time = (dates - dates[0]).astype("timedelta64[s]").astype(np.float64) / 86400.0
    since_prev = np.diff(close_time, prepend=close_time[0] - OPEN_TO_CLOSE_DAYS)
    return close_time, close_time - np.minimum(OPEN_TO_CLOSE_DAYS, since_prev)


def expiry_table(
    dates: np.ndarray, close_time: np.ndarray, expiries_days: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(T, E) bar index and time (days) at which an option bought on bar t with each
    calendar expiry expires.

    It is listed for the calendar day t + E days and expires at the close of the last bar on or
    before that day. Past the data's last day it never expires inside the data: bar index T,
    time close_time[t] + E.
    """
    days = dates.astype("datetime64[D]")
    bars = np.empty((len(dates), len(expiries_days)), dtype=np.int64)
    times = np.empty(bars.shape, dtype=np.float64)
    for e, span in enumerate(expiries_days):
        listed = days + np.timedelta64(span, "D")
        index = np.searchsorted(days, listed, side="right") - 1
        beyond = listed > days[-1]
        bars[:, e] = np.where(beyond, len(dates), index)
        times[:, e] = np.where(
            beyond, close_time + span, close_time[np.minimum(index, len(dates) - 1)]
        )
    return bars, times


@dataclass
class Quotes:
    """Per-bar tensors: (S, T) series, (T,) clock, (T, G) expiries, (S, T, G or 2G) chain quotes."""

    inputs: MarketInputs
    close_px: Tensor
    iv_close: Tensor
    rate_close: Tensor
    close_time: Tensor  # (T,)
    base_volume: Tensor  # (S, T) at-the-money option-volume proxy known at bar t's close
    # (S, T) where an order filled at bar t trades: the open, or the close after a stale open
    fill_px: Tensor
    fill_iv: Tensor
    fill_rate: Tensor
    fill_time: Tensor  # (S, T)
    long_run_iv: Tensor  # (S,)
    dividend_yield: Tensor  # (S,)
    expiry_bar: Tensor  # (T, G) in the env's float dtype (exact integers)
    expiry_time: Tensor  # (T, G)
    fill_strike: Tensor  # (S, T, G)
    fill_mid: Tensor  # (S, T, 2G): calls then puts
    fill_half_spread: Tensor  # (S, T, 2G)
    # (S, T, G): each strike's volume proxy at the fill (the decision bar's volume)
    fill_volume: Tensor
    fill_margin: Tensor  # (S, T, 2G): margin per share of one option sold short at the fill
    # (S, T, 2G): $ per contract of one contract bought at t's close, before fees (the mask)
    close_ask: Tensor
    close_bid: Tensor  # (S, T, 2G): $ per contract of one contract sold at t's close, before fees
    # (S, T, 2G): the margin of one contract sold at t's close ($ per contract)
    close_short_margin: Tensor
    margin_a: Tensor  # (S,) short-option margin rates (docs/MARKET.md): a x spot ...
    margin_b: Tensor  # (S,) ... at least b x (strike for a put, spot for a call)
    # (S,) quote increments per underlying; None: no tick grid (every increment 0)
    ticks: Ticks | None


def build_quotes(
    data: MarketData,
    market: MarketConfig,
    moneyness: Tensor,
    expiry_index: Tensor,
    dtype: torch.dtype,
    device: torch.device,
) -> Quotes:
    """``moneyness``/``expiry_index``: (G,) per grid point, moneyness fastest."""
    inputs = market_inputs(data, market)
    as_tensor = lambda x: torch.as_tensor(  # noqa: E731
        np.ascontiguousarray(x, dtype=np.float64), dtype=dtype, device=device
    )
    dates = data.dates.values
    close_time, open_time = market_clock(dates)
    exp_bar, exp_time = expiry_table(dates, close_time, market.expiries_days)
    stale = inputs.stale_open
    # at t's open, t-1's rate is known
    prev_rate = np.concatenate([inputs.rate[:, :1], inputs.rate[:, :-1]], axis=1)
    costs = market.costs
    base = base_option_volume(data.bars.get("volume"), data.bars["close"].shape, costs)
    q = Quotes(
        inputs=inputs,
        close_px=as_tensor(data.bars["close"]),
        iv_close=as_tensor(inputs.iv_close),
        rate_close=as_tensor(inputs.rate),
        close_time=as_tensor(close_time),
        base_volume=as_tensor(base),
        fill_px=as_tensor(np.where(stale, data.bars["close"], data.bars["open"])),
        fill_iv=as_tensor(np.where(stale, inputs.iv_close, inputs.iv_open)),
        fill_rate=as_tensor(np.where(stale, inputs.rate, prev_rate)),
        fill_time=as_tensor(np.where(stale, close_time, open_time)),
        long_run_iv=as_tensor(inputs.long_run_iv),
        dividend_yield=as_tensor(inputs.dividend_yield),
        expiry_bar=as_tensor(exp_bar[:, expiry_index.cpu().numpy()]),
        expiry_time=as_tensor(exp_time[:, expiry_index.cpu().numpy()]),
        fill_strike=None,
        fill_mid=None,
        fill_half_spread=None,
        fill_volume=None,
        fill_margin=None,
        close_ask=None,
        close_bid=None,
        close_short_margin=None,  # below
        margin_a=None,
        margin_b=None,
        ticks=None,
    )
    rates = as_tensor(margin_rates(data.broad_index, len(data.symbols), market))
    q.margin_a, q.margin_b = rates[:, 0].contiguous(), rates[:, 1].contiguous()
    ticks = tick_sizes(data.broad_index, len(data.symbols), market)
    if ticks.any():
        grid = as_tensor(ticks)
        q.ticks = Ticks(grid[:, 0].contiguous(), grid[:, 1].contiguous(), costs.tick_break)
    chain_ticks = ticks_of(q, None)
    # (2G,): calls, then puts
    calls = torch.arange(2 * moneyness.numel(), device=device) < moneyness.numel()
    # a fill at t knows t-1's volume
    prev_base = torch.cat([q.base_volume[:, :1], q.base_volume[:, :-1]], dim=1)
    q.fill_strike, q.fill_mid, q.fill_half_spread, q.fill_volume = _quote_chain(
        q, market, moneyness, q.fill_px, q.fill_iv, q.fill_rate, q.fill_time, prev_base
    )
    q.fill_margin = _margin(q, q.fill_mid, q.fill_px, q.fill_strike, calls)
    strike, mids, half, volume_at_close = _quote_chain(
        q,
        market,
        moneyness,
        q.close_px,
        q.iv_close,
        q.rate_close,
        q.close_time.expand_as(q.close_px),
        q.base_volume,
    )
    one_ask = fill_price_at(
        mids, 1.0, False, half, volume_at_close.repeat(1, 1, 2), costs, chain_ticks
    )
    one_bid = fill_price_at(
        mids, 1.0, True, half, volume_at_close.repeat(1, 1, 2), costs, chain_ticks
    )
    q.close_ask, q.close_bid = one_ask * market.multiplier, one_bid * market.multiplier
    q.close_short_margin = _margin(q, mids, q.close_px, strike, calls) * market.multiplier
    return q


def ticks_of(q: Quotes, sym: Tensor | None) -> Ticks | None:
    """The tick grid of the underlyings ``sym`` (one per order), or shaped (S, 1, 1) for the chain
    tables (``sym`` None); None where there is no grid."""
    if q.ticks is None:
        return None
    if sym is None:
        return Ticks(q.ticks.small.view(-1, 1, 1), q.ticks.large.view(-1, 1, 1), q.ticks.boundary)
    return Ticks(
        q.ticks.small.index_select(0, sym), q.ticks.large.index_select(0, sym), q.ticks.boundary
    )


def _margin(q: Quotes, mids: Tensor, spot: Tensor, strike: Tensor, calls: Tensor) -> Tensor:
    """(S, T, 2G) margin per share of each chain option sold short at ``spot`` (calls then puts)."""
    col = lambda x: x.view(-1, 1, 1)  # noqa: E731
    return short_margin(
        mids, spot.unsqueeze(-1), strike.repeat(1, 1, 2), calls, col(q.margin_a), col(q.margin_b)
    )


def _quote_chain(
    q: Quotes,
    market: MarketConfig,
    moneyness: Tensor,
    spot: Tensor,
    atm: Tensor,
    rate: Tensor,
    time: Tensor,
    base_volume: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Strikes (S, T, G), call-then-put mids and half spreads (S, T, 2G), strike volumes (S, T, G)
    of the chain listed at ``time`` on each bar (expiries from the bar's own expiry table)."""
    g = moneyness.numel()
    col = lambda x: x.unsqueeze(-1)  # noqa: E731
    spot_g = col(spot).expand(*spot.shape, g)
    strike = chain_strikes(spot_g, moneyness.expand_as(spot_g), market)
    years = ((q.expiry_time.unsqueeze(0) - col(time)) / DAYS_PER_YEAR).clamp_min(0)
    log_k_s = torch.log(strike / spot_g)
    iv = surface_iv(col(atm), q.long_run_iv.view(-1, 1, 1), log_k_s, years, market)
    mids = torch.cat(
        bs_call_put(spot_g, strike, years, col(rate), q.dividend_yield.view(-1, 1, 1), iv), -1
    )
    half = half_spread(mids, iv.repeat(1, 1, 2), log_k_s.repeat(1, 1, 2), market.costs)
    volume = strike_volume(col(base_volume), log_k_s, years, market.costs, ATM_YEARS)
    return strike, mids, half, volume
