"""One env copy written again in plain Python floats, a position list and docs/MARKET.md section 1's rules.

Nothing here is vectorised, slot-major, or shared with clstm_ppo's market and env code: Black-Scholes uses
math.erfc; the clock, the fill point (open, or close after a stale open), expiries on trading dates, the vol
surface, strikes, the strike-volume proxy and its order cap, spreads, slippage and fees are written out from
their definitions. Only the per-bar series of ``clstm_ppo.market.inputs.market_inputs`` (implied vol at each
open and close, rates, the dividend yield, the long-run vol, which opens are stale) are taken as data: they
are tested on their own elsewhere. The batched env must agree with this step by step, observation and mask
included (tests/test_env.py).
"""
from __future__ import annotations

import datetime
import math
from dataclasses import dataclass

import pandas as pd

from clstm_ppo.config import EnvConfig, MarketConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.market.inputs import market_inputs

NICE_STEPS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0)
YEAR_DAYS = 365.0  # option time is calendar time
ATM_DAYS = 30.0  # the maturity the at-the-money series quotes
SESSION_DAYS = 6.5 / 24.0  # a bar opens 6.5 hours before its close (or at the previous close, if nearer)
COST_NAMES = ("spread", "slippage", "commission", "occ_clearing", "finra_taf", "sec_fee", "orf")


def norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def black_scholes(spot: float, strike: float, years: float, r: float, q: float, vol: float, call: bool) -> float:
    if years <= 1e-8:
        return max(spot - strike, 0.0) if call else max(strike - spot, 0.0)
    d1 = (math.log(spot / strike) + (r - q + 0.5 * vol * vol) * years) / (vol * math.sqrt(years))
    d2 = d1 - vol * math.sqrt(years)
    if call:
        price = spot * math.exp(-q * years) * norm_cdf(d1) - strike * math.exp(-r * years) * norm_cdf(d2)
    else:
        price = strike * math.exp(-r * years) * norm_cdf(-d2) - spot * math.exp(-q * years) * norm_cdf(-d1)
    return max(price, 0.0)


def greeks(spot: float, strike: float, years: float, r: float, q: float, vol: float, call: bool) -> tuple:
    """Textbook (delta, gamma, vega, theta) per share; vega per 1.00 of vol, theta per year of time passing."""
    root = math.sqrt(years)
    d1 = (math.log(spot / strike) + (r - q + 0.5 * vol * vol) * years) / (vol * root)
    d2 = d1 - vol * root
    density = math.exp(-0.5 * d1 * d1) / math.sqrt(2 * math.pi)
    carry, discount = math.exp(-q * years), math.exp(-r * years)
    gamma = carry * density / (spot * vol * root)
    vega = spot * carry * density * root
    decay = -spot * carry * density * vol / (2 * root)
    if call:
        return (carry * norm_cdf(d1), gamma, vega,
                decay - r * strike * discount * norm_cdf(d2) + q * spot * carry * norm_cdf(d1))
    return (-carry * norm_cdf(-d1), gamma, vega,
            decay + r * strike * discount * norm_cdf(-d2) - q * spot * carry * norm_cdf(-d1))


@dataclass
class Point:
    """Where a trade or a mark happens: the underlying's price, the 30-day ATM vol, the rate and the time (days)."""
    spot: float
    atm: float
    rate: float
    time: float
    stale: bool = False  # a fill moved to the close because the bar's open was stale


@dataclass
class Quote:
    call: bool
    strike: float
    listed_day: datetime.date  # the calendar day it is listed to expire on
    expiry_bar: int | None  # None: expires after the data ends
    expiry_time: float
    mid: float
    vol: float
    half: float  # half the quoted spread, a share of mid
    volume: float  # the strike's option-volume proxy


class ReferenceMarket:
    """One underlying's bars as Python lists, and every rule that depends only on the bar, not on a copy."""

    def __init__(self, data: MarketData, market: MarketConfig, sym: int):
        self.m, self.c = market, market.costs
        inputs = market_inputs(data, market)  # data here: tested in tests/test_market_inputs.py
        floats = lambda row: [float(x) for x in row]  # noqa: E731
        self.open, self.close = floats(data.bars["open"][sym]), floats(data.bars["close"][sym])
        self.iv_close, self.iv_open = floats(inputs.iv_close[sym]), floats(inputs.iv_open[sym])
        self.rate, self.stale = floats(inputs.rate[sym]), [bool(x) for x in inputs.stale_open[sym]]
        self.q, self.long_run = float(inputs.dividend_yield[sym]), float(inputs.long_run_iv[sym])
        self.turbulent = [bool(x > data.turbulence_threshold) for x in data.turbulence]
        volume = data.bars.get("volume")
        self.base_volume = ([max(float(v) * self.c.option_volume_ratio, self.c.min_option_volume)
                             for v in volume[sym]] if volume is not None
                            else [self.c.min_option_volume] * len(self.close))
        # The clock: days since the first bar's timestamp; a bar opens 6.5 hours before its close, or at the
        # previous bar's close when that is nearer.
        stamps = [pd.Timestamp(x).to_pydatetime() for x in data.dates]
        self.day: list[datetime.date] = [s.date() for s in stamps]
        self.close_time = [(s - stamps[0]).total_seconds() / 86400.0 for s in stamps]
        self.open_time = [self.close_time[0] - SESSION_DAYS] + [
            now - min(SESSION_DAYS, now - before) for before, now in zip(self.close_time, self.close_time[1:])]
        self._expiries: dict[tuple[int, float], tuple] = {}

    # ---------------------------------------------------------------- where trades and marks happen

    def fill_point(self, u: int) -> Point:
        """An order for bar u: at its open (the rate known then is bar u-1's), or at its close after a stale open."""
        if self.stale[u]:
            return Point(self.close[u], self.iv_close[u], self.rate[u], self.close_time[u], stale=True)
        return Point(self.open[u], self.iv_open[u], self.rate[u - 1], self.open_time[u])

    def close_point(self, t: int) -> Point:
        return Point(self.close[t], self.iv_close[t], self.rate[t], self.close_time[t])

    def expiry(self, u: int, days: float) -> tuple[datetime.date, int | None, float]:
        """(listed day, bar, time) of an option bought at bar u with ``days`` calendar days: listed for the day
        day(u) + days, it expires at the close of the last bar on or before that day; past the data, never
        (time close_time[u] + days)."""
        if (u, days) not in self._expiries:
            listed = self.day[u] + datetime.timedelta(days=days)
            if listed > self.day[-1]:
                self._expiries[u, days] = listed, None, self.close_time[u] + days
            else:
                bar = u
                while bar + 1 < len(self.day) and self.day[bar + 1] <= listed:
                    bar += 1
                self._expiries[u, days] = listed, bar, self.close_time[bar]
        return self._expiries[u, days]

    # ---------------------------------------------------------------- the vol surface and the chain

    def atm_at(self, atm30: float, years: float) -> float:
        """Term structure: variance reverts from the 30-day level to the long-run vol at term_reversion a year."""
        kappa, long_var = self.m.term_reversion, self.long_run ** 2
        share = lambda x: 1.0 if x == 0 else -math.expm1(-x) / x  # noqa: E731  (1 - e^-x) / x
        var = long_var + (atm30 ** 2 - long_var) * share(kappa * years) / share(kappa * ATM_DAYS / YEAR_DAYS)
        return math.sqrt(max(var, self.m.min_iv ** 2))

    def vol(self, atm30: float, strike: float, spot: float, years: float) -> float:
        m = self.m
        z = math.log(strike / spot) / math.sqrt(max(years, 1.0 / YEAR_DAYS) / (ATM_DAYS / YEAR_DAYS))
        z = min(max(z, -m.iv_wing_z), m.iv_wing_z)  # flat beyond the wings
        return min(max(self.atm_at(atm30, years) - m.iv_skew * z + m.iv_smile * z * z, m.min_iv), m.max_iv)

    def half_spread(self, mid: float, vol: float, strike: float, spot: float) -> float:
        c = self.c
        cheap = min(max(1.0 - mid / c.spread_cheap_price, 0.0), 1.0) * c.spread_cheap_coef
        far = abs(math.log(strike / spot)) * c.spread_moneyness_coef
        stormy = max(vol - 0.20, 0.0) * c.spread_vol_coef
        quoted = c.spread_base * (1 + cheap) * (1 + far) * (1 + stormy)
        return 0.5 * min(max(quoted, c.spread_min), c.spread_max)

    def strike_volume(self, t: int, strike: float, spot: float, years: float) -> float:
        """Option-volume proxy of a strike on decision bar t, at the moneyness and maturity of the trade."""
        c, atm_years = self.c, ATM_DAYS / YEAR_DAYS
        far = math.exp(-abs(math.log(strike / spot)) / c.volume_moneyness_width)
        longer = (atm_years / max(years, atm_years)) ** c.volume_expiry_power
        return max(self.base_volume[t] * far * longer, c.min_option_volume)

    def strike(self, spot: float, moneyness: float) -> float:
        m = self.m
        step = max([s for s in NICE_STEPS if s <= 0.005 * spot] or [NICE_STEPS[0]]) if m.strike_step <= 0 \
            else m.strike_step
        return max(round(spot * moneyness / step) * step, step)

    def years(self, expiry_time: float, time: float) -> float:
        return max(expiry_time - time, 0.0) / YEAR_DAYS

    def price(self, call: bool, strike: float, expiry_time: float, at: Point) -> tuple[float, float]:
        """(Black-Scholes mid per share, vol) at ``at``."""
        years = self.years(expiry_time, at.time)
        vol = self.vol(at.atm, strike, at.spot, years)
        return black_scholes(at.spot, strike, years, at.rate, self.q, vol, call), vol

    def quote(self, index: int, grid: list[tuple[float, float]], bar: int, at: Point, volume_bar: int) -> Quote:
        """Chain point ``index`` (calls, then puts; moneyness fastest) listed on ``bar`` and quoted at ``at``, with
        the volume of ``volume_bar``."""
        call, (moneyness, days) = index < len(grid), grid[index % len(grid)]
        strike = self.strike(at.spot, moneyness)
        listed, expiry_bar, expiry_time = self.expiry(bar, days)
        mid, vol = self.price(call, strike, expiry_time, at)
        volume = self.strike_volume(volume_bar, strike, at.spot, self.years(expiry_time, at.time))
        return Quote(call, strike, listed, expiry_bar, expiry_time, mid, vol,
                     self.half_spread(mid, vol, strike, at.spot), volume)


@dataclass
class Position:
    call: bool
    strike: float
    listed_day: datetime.date
    expiry_bar: int | None
    expiry_time: float
    contracts: float
    entry_cost: float  # dollars paid, fees included
    mark: float = 0.0  # dollars at the last close
    greeks: tuple = (0.0, 0.0, 0.0, 0.0)  # per share at the last close


@dataclass
class Seen:
    """Which paths a copy went through (the tests check each was exercised)."""
    stale_fills: int = 0
    open_fills: int = 0
    buys: int = 0
    capped_buys: int = 0  # size cut by max_volume_share
    expiries: int = 0
    early_expiries: int = 0  # expired on a bar before the listed calendar day (no bar on that day)
    expiry_sales: int = 0  # sold on the bar it expires at
    same_bar_buys: int = 0  # bought on the bar it expires at


class ReferenceCopy:
    """One copy from a given start: ``step(action)`` trades at t+1's fill and marks at t+1's close."""

    def __init__(self, market: ReferenceMarket, t: int, t_end: int, env: EnvConfig):
        self.mk, self.m, self.c, self.e = market, market.m, market.c, env
        self.t, self.t_start, self.t_end = t, t, t_end
        self.cash = self.equity = env.initial_cash
        self.slots: list[Position | None] = [None] * env.max_positions
        self.costs = dict.fromkeys(COST_NAMES, 0.0)
        self.closed = self.wins = 0
        self.seen = Seen()

    # ---------------------------------------------------------------- orders

    def impact(self, contracts: float, volume: float) -> float:
        return min(self.c.slippage_coef * contracts / volume, self.c.max_slippage)

    def trade(self, mid: float, half: float, contracts: float, volume: float, sell: bool) -> float:
        """Dollars in for a sale or out for a buy, fees included; adds every cost to its kind."""
        c, shares = self.c, contracts * self.m.multiplier
        impact = self.impact(contracts, volume)
        price = mid * (1 - half - impact) if sell else mid * (1 + half + impact)
        fees = {"commission": max(c.commission_per_contract * contracts, c.commission_min_per_order),
                "occ_clearing": c.occ_clearing_per_contract * contracts,
                "finra_taf": c.finra_taf_per_contract * contracts if sell else 0.0,
                "sec_fee": price * shares * c.sec_fee_per_million / 1e6 if sell else 0.0,
                "orf": c.orf_per_contract * contracts}
        for kind, dollars in {"spread": mid * half * shares, "slippage": mid * impact * shares, **fees}.items():
            self.costs[kind] += dollars
        return (price * shares - sum(fees.values())) if sell else (price * shares + sum(fees.values()))

    def cash_room(self) -> float:
        """Cash left after every open position's closing-fee reserve and two per-order commission minimums."""
        c = self.c
        reserve = sum(max(c.commission_per_contract * p.contracts, c.commission_min_per_order)
                      + (c.occ_clearing_per_contract + c.finra_taf_per_contract + c.orf_per_contract) * p.contracts
                      for p in self.open_positions())
        return self.cash - reserve - 2 * c.commission_min_per_order

    # ---------------------------------------------------------------- one bar

    def step(self, action: int, grid: list[tuple[float, float]], close_all: int, close_worst: int,
             close_best: int) -> float:
        mk, t = self.mk, self.t
        u = t + 1
        fill = mk.fill_point(u)
        if fill.stale:
            self.seen.stale_fills += 1
        else:
            self.seen.open_fills += 1
        held = [i for i, p in enumerate(self.slots) if p is not None]
        if mk.turbulent[t] or action == close_all:
            to_sell = held
        elif action in (close_worst, close_best) and held:
            pnl = [self.slots[i].mark - self.slots[i].entry_cost for i in held]
            target = min(pnl) if action == close_worst else max(pnl)
            to_sell = [held[pnl.index(target)]]  # the first slot among equals
        else:
            to_sell = []
        to_sell = [i for i in to_sell if self.slots[i].expiry_time > fill.time]  # else it settles at intrinsic
        for i in to_sell:  # sells first
            p = self.slots[i]
            mid, vol = mk.price(p.call, p.strike, p.expiry_time, fill)
            volume = mk.strike_volume(t, p.strike, fill.spot, mk.years(p.expiry_time, fill.time))
            proceeds = self.trade(mid, mk.half_spread(mid, vol, p.strike, fill.spot), p.contracts, volume, sell=True)
            self.seen.expiry_sales += p.expiry_bar == u
            self.settle(i, proceeds)
        if 1 <= action <= 2 * len(grid):
            self.buy(mk.quote(action - 1, grid, u, fill, t))
        close = mk.close[u]
        for i, p in enumerate(self.slots):
            if p is not None and p.expiry_bar is not None and p.expiry_bar <= u:  # at intrinsic, without fees
                self.seen.expiries += 1
                self.seen.early_expiries += mk.day[u] < p.listed_day
                self.settle(i, max((close - p.strike) if p.call else (p.strike - close), 0.0) * p.contracts
                            * self.m.multiplier)
        self.t = u
        at = mk.close_point(u)
        for p in self.open_positions():
            years = mk.years(p.expiry_time, at.time)
            vol = mk.vol(at.atm, p.strike, at.spot, years)
            args = (at.spot, p.strike, years, at.rate, mk.q, vol, p.call)
            p.mark = black_scholes(*args) * p.contracts * self.m.multiplier
            p.greeks = greeks(*args)
        before, self.equity = self.equity, self.cash + sum(p.mark for p in self.open_positions())
        return (self.equity - before) * self.e.reward_scale / self.e.initial_cash

    def buy(self, quote: Quote) -> None:
        """Size: position_frac of equity at the one-contract ask, at most max_volume_share of the strike's
        volume proxy; then as many as the cash room pays for, with each contract's buying and closing fees."""
        m, c, mid, half, volume = self.m, self.c, quote.mid, quote.half, quote.volume
        first_ask = mid * (1 + half + self.impact(1.0, volume))
        by_equity = math.floor(self.e.position_frac * self.equity / max(first_ask * m.multiplier, 1e-12))
        cap = math.floor(c.max_volume_share * volume)
        wanted = min(by_equity, cap)
        ask = mid * (1 + half + self.impact(wanted, volume))
        per_contract = ask * m.multiplier + 2 * (c.commission_per_contract + c.occ_clearing_per_contract
                                                 + c.orf_per_contract) + c.finra_taf_per_contract
        contracts = min(wanted, math.floor(max(self.cash_room() / max(per_contract, 1e-12), 0.0)))
        free = [i for i, p in enumerate(self.slots) if p is None]
        if contracts < 1 or not free:
            return
        self.seen.buys += 1
        self.seen.same_bar_buys += quote.expiry_bar == self.t + 1
        self.seen.capped_buys += contracts == cap < by_equity
        cost = self.trade(mid, half, contracts, volume, sell=False)
        self.cash -= cost
        self.slots[free[0]] = Position(quote.call, quote.strike, quote.listed_day, quote.expiry_bar,
                                       quote.expiry_time, contracts, cost)

    # ---------------------------------------------------------------- what the copy observes at t

    def mask(self, grid: list[tuple[float, float]]) -> list[bool]:
        """Valid actions at t: hold; a buy if a slot is free, the bar is calm and one contract (with its buying
        and closing fees), quoted on t's chain at t's close, fits both the cash room and position_frac of equity;
        the three closes if anything is open."""
        c, t, held = self.c, self.t, len(self.open_positions())
        fees = 2 * (max(c.commission_per_contract, c.commission_min_per_order) + c.occ_clearing_per_contract
                    + c.orf_per_contract) + c.finra_taf_per_contract
        budget = min(self.cash_room(), self.e.position_frac * self.equity)
        at, buys = self.mk.close_point(t), []
        for index in range(2 * len(grid)):
            quote = self.mk.quote(index, grid, t, at, t)
            one = quote.mid * (1 + quote.half + self.impact(1.0, quote.volume)) * self.m.multiplier + fees
            buys.append(held < self.e.max_positions and not self.mk.turbulent[t] and one <= budget)
        return [True, *buys, *[held > 0] * 3]

    def portfolio(self) -> list[float]:
        """The observation's portfolio features at t (clstm_ppo.env.PORTFOLIO_FEATURES, in that order)."""
        held, spot, mult = self.open_positions(), self.mk.close[self.t], self.m.multiplier
        net = [sum(p.greeks[k] * p.contracts * mult for p in held) for k in range(4)]
        dollar_greeks = [net[0] * spot, net[1] * spot * spot * 1e-4, net[2] * 0.01, net[3] / YEAR_DAYS]
        days = sum(p.expiry_time - self.mk.close_time[self.t] for p in held) / max(len(held), 1)
        return [self.cash / self.equity, len(held) / self.e.max_positions, *(g / self.equity for g in dollar_greeks),
                sum(p.mark - p.entry_cost for p in held) / self.equity, days / max(self.m.expiries_days),
                float(self.mk.turbulent[self.t]), self.equity / self.e.initial_cash - 1,
                (self.t - self.t_start) / max(self.t_end - self.t_start, 1)]

    def settle(self, slot: int, cash_in: float) -> None:
        self.cash += cash_in
        self.closed += 1
        self.wins += cash_in > self.slots[slot].entry_cost
        self.slots[slot] = None

    def open_positions(self) -> list[Position]:
        return [p for p in self.slots if p is not None]
