"""One env copy written again in plain Python floats, a position list and docs/MARKET.md section 1's rules.

Nothing here is vectorised, slot-major, or shared with clstm_ppo's market and env code: Black-Scholes uses
math.erfc; the clock, the fill point (open, or close after a stale open), expiries on trading dates, the vol
surface, strikes, the strike-volume proxy and its order cap, spreads, slippage and fees, short options (signed
marks and entry costs, buy-backs at the ask), their margin and its covered-call offset, margin calls, the carry
of cash at the rate and of dividends on shares, the underlying's targets, the action layout, the mask and the
observed portfolio are written out from their definitions. Only the per-bar series of
``clstm_ppo.market.inputs.market_inputs`` (implied vol at each open and close, rates, the dividend yield, the
long-run vol, which opens are stale) and the margin rates (a, b) of ``clstm_ppo.market.margin.margin_rates``
(index or stock, per underlying) are taken as data: they are tested on their own elsewhere. The batched env
must agree with this step by step, observation and mask included (tests/test_env_reference.py).

Sizes follow docs/MARKET.md's "Sizing": with ``market.sizing: whole`` every count of contracts or shares is
floored and an order needs one; with ``fractional`` (the default) counts are taken as they come and an order (or
a change of the shares) needs a millionth of equity in notional.
"""
from __future__ import annotations

import datetime
import math
from dataclasses import dataclass

import pandas as pd

from clstm_ppo.config import EnvConfig, MarketConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.market.inputs import market_inputs
from clstm_ppo.market.margin import margin_rates

NICE_STEPS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0)
YEAR_DAYS = 365.0  # option time is calendar time
ATM_DAYS = 30.0  # the maturity the at-the-money series quotes
SESSION_DAYS = 6.5 / 24.0  # a bar opens 6.5 hours before its close (or at the previous close, if nearer)
DUST = 1e-6  # a fractional order under this share of equity in notional is none (docs/MARKET.md, "Sizing")
COST_NAMES = ("spread", "slippage", "commission", "occ_clearing", "finra_taf", "sec_fee", "orf", "shares")


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
            now - min(SESSION_DAYS, now - before)
            for before, now in zip(self.close_time, self.close_time[1:], strict=False)]
        self._expiries: dict[tuple[int, float], tuple] = {}
        # Short-option margin rates (a, b): index or stock rates per underlying, taken as data.
        self.margin_a, self.margin_b = (float(x) for x in margin_rates(data.broad_index, len(data.symbols),
                                                                        market)[sym])
        # The quote grid: an index's ticks or a stock's, chosen as the margin rates are (margin_style, else the data).
        index = market.margin_style == "index" if market.margin_style != "auto" \
            else data.broad_index is not None and bool(data.broad_index[sym])
        self.ticks = self.c.index_ticks if index else self.c.stock_ticks

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
        skew = m.iv_call_skew if z > 0 else m.iv_skew  # the call wing (above the money) has its own skew
        return min(max(self.atm_at(atm30, years) - skew * z + m.iv_smile * z * z, m.min_iv), m.max_iv)

    def half_spread(self, mid: float, vol: float, strike: float, spot: float) -> float:
        c = self.c
        cheap = min(max(1.0 - mid / c.spread_cheap_price, 0.0), 1.0) * c.spread_cheap_coef
        far = abs(math.log(strike / spot)) * c.spread_moneyness_coef
        stormy = max(vol - 0.20, 0.0) * c.spread_vol_coef
        quoted = c.spread_base * (1 + cheap) * (1 + far) * (1 + stormy)
        return 0.5 * min(max(quoted, c.spread_min), c.spread_max)

    def side_quote(self, mid: float, half: float, sell: bool) -> float:
        """The bid (``sell``) or ask: mid less or plus half the spread, rounded down or up to the tick grid ($ a
        share; a tick of 0: off the grid)."""
        raw = mid * (1 - half) if sell else mid * (1 + half)
        tick = self.ticks[0] if raw < self.c.tick_break else self.ticks[1]
        if tick <= 0:
            return raw
        steps = raw / tick
        return (math.floor(steps + 1e-4) if sell else max(math.ceil(steps - 1e-4), 1)) * tick  # an ask: >= 1 tick

    def fill_price(self, mid: float, half: float, impact: float, sell: bool) -> float:
        """Per share: the bid less ``impact`` of mid (never below 0) for a sale, the ask plus it for a buy."""
        quote = self.side_quote(mid, half, sell)
        return max(quote - mid * impact, 0.0) if sell else quote + mid * impact

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

    def margin(self, premium: float, spot: float, strike: float, call: bool) -> float:
        """Requirement per share of one short option: max(premium + a S - OTM, premium + b (K for a put, S for a
        call)), OTM the amount the option is out of the money."""
        out_of_money = max(strike - spot, 0.0) if call else max(spot - strike, 0.0)
        return max(premium + self.margin_a * spot - out_of_money,
                   premium + self.margin_b * (spot if call else strike))

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


class Layout:
    """The discrete actions (clstm_ppo/env/actions.py's table): hold; buy a call, buy a put at each grid point
    (moneyness fastest, then expiry); the same sold to open where shorts are allowed; one action per underlying
    target; close all, close worst, close best."""

    def __init__(self, market: MarketConfig):
        self.grid = [(m, float(e)) for e in market.expiries_days for m in market.moneyness]
        self.allow_short, self.targets = market.allow_short, [float(x) for x in market.stock_targets]
        self.orders = (4 if self.allow_short else 2) * len(self.grid)
        self.first_target = 1 + self.orders
        self.close_all = self.first_target + len(self.targets)
        self.close_worst, self.close_best, self.n = self.close_all + 1, self.close_all + 2, self.close_all + 3

    def order(self, action: int) -> tuple[int, bool] | None:
        """(chain index: calls then puts, sold) of an option order, else None."""
        if not 1 <= action <= self.orders:
            return None
        index = action - 1
        return index % (2 * len(self.grid)), index >= 2 * len(self.grid)

    def target(self, action: int) -> float | None:
        return self.targets[action - self.first_target] if self.first_target <= action < self.close_all else None


@dataclass
class Position:
    call: bool
    strike: float
    listed_day: datetime.date
    expiry_bar: int | None
    expiry_time: float
    contracts: float
    entry_cost: float  # dollars paid, fees included; minus what a sale brought in
    short: bool = False
    mark: float = 0.0  # dollars at the last close: + a long's value, - what buying a short back would cost at mid
    mid: float = 0.0  # per share at the last close
    greeks: tuple = (0.0, 0.0, 0.0, 0.0)  # per share held long, at the last close

    @property
    def side(self) -> float:
        return -1.0 if self.short else 1.0


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
    same_bar_buys: int = 0  # opened (bought or sold) on the bar it expires at
    sales: int = 0  # sold to open
    room_bound_sales: int = 0  # sized by the cash room, below position_frac's margin and the volume cap
    buybacks: int = 0  # shorts bought back at the ask (chosen, turbulent or margin call)
    short_expiries_itm: int = 0  # a short settled paying its intrinsic value
    short_expiries_otm: int = 0  # a short settled worthless: it keeps its premium
    covered_marks: int = 0  # closes where shares covered (part of) the short calls' margin
    margin_calls: int = 0
    margin_call_closes: int = 0  # shorts bought back by a margin call
    share_buys: int = 0
    share_sales: int = 0
    room_bound_share_buys: int = 0  # a target cut by the cash room
    dividend_steps: int = 0  # steps where shares were held over the carry
    rejected: int = 0  # an order the fill could not size to one contract
    notional_bound: int = 0  # an order cut by env.max_order_notional
    notional_masked: int = 0  # mask calls where one contract's notional was above that cap
    covered_past_cap: int = 0  # covered calls offered where that cap forbade a naked one


class ReferenceCopy:
    """One copy from a given start: ``step(action)`` trades at t+1's fill and marks at t+1's close."""

    def __init__(self, market: ReferenceMarket, t: int, t_end: int, env: EnvConfig):
        self.mk, self.m, self.c, self.e = market, market.m, market.c, env
        self.layout = Layout(market.m)
        self.t, self.t_start, self.t_end = t, t, t_end
        self.cash = self.equity = env.initial_cash
        self.shares = self.margin = 0.0
        self.slots: list[Position | None] = [None] * env.max_positions
        self.costs = dict.fromkeys(COST_NAMES, 0.0)
        self.closed = self.wins = self.margin_calls = 0
        self.seen = Seen()
        self.whole = market.m.sizing == "whole"

    def count(self, size: float) -> float:
        """Contracts or shares as the account may hold them: floored to whole ones, or any amount."""
        return float(math.floor(size)) if self.whole else size

    def least(self, unit_notional: float) -> float:
        """The fewest units (each ``unit_notional`` dollars of the underlying) an order may have."""
        return 1.0 if self.whole else DUST * max(self.equity, 0.0) / unit_notional

    # ---------------------------------------------------------------- orders

    def impact(self, contracts: float, volume: float) -> float:
        return min(self.c.slippage_coef * contracts / volume, self.c.max_slippage)

    def trade(self, mid: float, half: float, contracts: float, volume: float, sell: bool) -> float:
        """Dollars in for a sale or out for a buy, fees included; adds every cost to its kind. A sale (to close a
        long or to open a short) pays the TAF and the SEC fee; a purchase (to open or to buy back) does not."""
        c, shares = self.c, contracts * self.m.multiplier
        impact = self.impact(contracts, volume)
        quote = self.mk.side_quote(mid, half, sell)
        price = self.mk.fill_price(mid, half, impact, sell)
        fees = {"commission": max(c.commission_per_contract * contracts, c.commission_min_per_order),
                "occ_clearing": c.occ_clearing_per_contract * contracts,
                "finra_taf": c.finra_taf_per_contract * contracts if sell else 0.0,
                "sec_fee": price * shares * c.sec_fee_per_million / 1e6 if sell else 0.0,
                "orf": c.orf_per_contract * contracts}
        for kind, dollars in {"spread": abs(quote - mid) * shares, "slippage": abs(price - quote) * shares,
                              **fees}.items():
            self.costs[kind] += dollars
        return (price * shares - sum(fees.values())) if sell else (price * shares + sum(fees.values()))

    def cash_room(self) -> float:
        """Cash left after the shorts' margin (as marked at the last close), every open position's closing-fee
        reserve and two per-order commission minimums."""
        c = self.c
        reserve = sum(max(c.commission_per_contract * p.contracts, c.commission_min_per_order)
                      + (c.occ_clearing_per_contract + c.finra_taf_per_contract + c.orf_per_contract) * p.contracts
                      for p in self.open_positions())
        return self.cash - self.margin - reserve - 2 * c.commission_min_per_order

    def round_trip_fees(self, minimum: bool) -> float:
        """Per contract: opening and closing commission (at least its minimum, for the mask of whole contracts;
        a fractional order's minimums are in the cash room already), OCC and ORF, and one TAF."""
        c = self.c
        commission = max(c.commission_per_contract, c.commission_min_per_order) if minimum and self.whole \
            else c.commission_per_contract
        return 2 * (commission + c.occ_clearing_per_contract + c.orf_per_contract) + c.finra_taf_per_contract

    # ---------------------------------------------------------------- one bar

    def step(self, action: int) -> float:
        mk, t, lay = self.mk, self.t, self.layout
        u = t + 1
        fill = mk.fill_point(u)
        if fill.stale:
            self.seen.stale_fills += 1
        else:
            self.seen.open_fills += 1
        # 0. Carry from t's close to u's close: a margin call is decided on t's close; cash earns the rate known
        # at t, the shares' holder receives the dividend yield.
        margin_call = self.margin_call()
        self.carry(t, u)
        self.seen.dividend_steps += self.shares > 0
        self.margin_calls += margin_call
        self.seen.margin_calls += margin_call
        # 1. Closes at u's fill.
        held = [i for i, p in enumerate(self.slots) if p is not None]
        close_all = mk.turbulent[t] or action == lay.close_all
        to_close = set(held) if close_all else set()
        if margin_call:
            to_close |= {i for i in held if self.called(self.slots[i])}
        if action in (lay.close_worst, lay.close_best) and held:
            pnl = [self.slots[i].mark - self.slots[i].entry_cost for i in held]
            target = min(pnl) if action == lay.close_worst else max(pnl)
            to_close.add(held[pnl.index(target)])  # the first slot among equals
        for i in sorted(to_close):
            p = self.slots[i]
            if p.expiry_time <= fill.time:  # it settles at intrinsic at u's close
                continue
            if p.short:
                self.seen.buybacks += 1
                self.seen.margin_call_closes += margin_call
            self.seen.expiry_sales += p.expiry_bar == u
            self.settle(i, self.close_at(p, fill, t))
        # 2. The underlying to its target (none on close-all; turbulence keeps it), buying only with the cash room.
        target = lay.target(action)
        wanted = 0.0 if action == lay.close_all else (
            max(self.count(target * self.equity / fill.spot), 0.0) if target is not None else self.shares)
        bps = self.c.share_cost_bps / 1e4
        most = self.shares if mk.turbulent[t] else self.share_cap(fill.spot, bps)  # no purchase when turbulent
        self.seen.room_bound_share_buys += wanted > most
        change = min(wanted, most) - self.shares
        if abs(change) < self.least(fill.spot) and action != lay.close_all:
            change = 0.0  # dust (fractional shares): no trade
        if change:
            self.seen.share_buys += change > 0
            self.seen.share_sales += change < 0
            fee = abs(change) * fill.spot * bps
            self.cash -= change * fill.spot + fee
            self.costs["shares"] += fee
            self.shares += change
        # 3. An option order: bought at the ask, or sold to open at the bid under margin.
        order = lay.order(action)
        if order is not None:
            index, sell = order
            self.open(mk.quote(index, lay.grid, u, fill, t), fill, sell)
        # 4. Settlement at u's close at intrinsic value, without fees: a long receives it, a short pays it.
        close = mk.close[u]
        for i, p in enumerate(self.slots):
            if p is not None and p.expiry_bar is not None and p.expiry_bar <= u:
                self.seen.expiries += 1
                self.seen.early_expiries += mk.day[u] < p.listed_day
                intrinsic = max((close - p.strike) if p.call else (p.strike - close), 0.0)
                if p.short:
                    self.seen.short_expiries_itm += intrinsic > 0
                    self.seen.short_expiries_otm += intrinsic == 0
                self.settle(i, p.side * intrinsic * p.contracts * self.m.multiplier)
        # 5. Marks, equity and margin at u's close.
        self.t = u
        at = mk.close_point(u)
        for p in self.open_positions():
            years = mk.years(p.expiry_time, at.time)
            vol = mk.vol(at.atm, p.strike, at.spot, years)
            args = (at.spot, p.strike, years, at.rate, mk.q, vol, p.call)
            p.mid = black_scholes(*args)
            p.mark = p.side * p.mid * p.contracts * self.m.multiplier
            p.greeks = greeks(*args)
        self.margin = self.margin_at_close()
        before = self.equity
        self.equity = self.cash + sum(p.mark for p in self.open_positions()) + self.shares * close
        return (self.equity - before) * self.e.reward_scale / self.e.initial_cash

    def margin_call(self) -> bool:
        """t's close left the shorts' margin uncovered by cash (a margin to cover: calls fully covered by shares
        need none, and negative cash alone is no margin call)."""
        return self.cash < self.margin and self.margin > 0

    def called(self, p: Position) -> bool:
        """Whether a margin call closes ``p``: every short, nothing else."""
        return p.short

    def carry(self, t: int, u: int) -> None:
        """From t's close to u's close cash earns (or a negative balance pays) the rate known at t; each share
        receives its dividend yield on t's close."""
        mk = self.mk
        years = (mk.close_time[u] - mk.close_time[t]) / YEAR_DAYS
        self.cash = self.cash * math.exp(mk.rate[t] * years) + self.shares * mk.close[t] * math.expm1(mk.q * years)

    def close_at(self, p: Position, fill: Point, t: int) -> float:
        """Cash in (negative for a short) of closing ``p`` at ``fill`` with the volume known at t: a long sells at
        the bid, a short is bought back at the ask."""
        mk = self.mk
        mid, vol = mk.price(p.call, p.strike, p.expiry_time, fill)
        volume = mk.strike_volume(t, p.strike, fill.spot, mk.years(p.expiry_time, fill.time))
        half = mk.half_spread(mid, vol, p.strike, fill.spot)
        if p.short:
            return -self.trade(mid, half, p.contracts, volume, sell=False)
        return self.trade(mid, half, p.contracts, volume, sell=True)

    def share_cap(self, price: float, bps: float) -> float:
        """The most shares the cash room lets the copy hold after a buy."""
        return self.shares + self.count(max(self.cash_room(), 0.0) / (price * (1 + bps)))

    def sale_unit(self, quote: Quote, fill: Point) -> float:
        """What position_frac of equity measures a sale in: one contract's margin at the fill."""
        return self.mk.margin(quote.mid, fill.spot, quote.strike, quote.call) * self.m.multiplier

    def margin_at_close(self) -> float:
        """Every short's margin at its mid and the close; shares cover the short calls share for share."""
        spot, mult, shorts = self.mk.close[self.t], self.m.multiplier, [p for p in self.open_positions() if p.short]
        need = [self.mk.margin(p.mid, spot, p.strike, p.call) * p.contracts * mult for p in shorts]
        call_shares = sum(p.contracts * mult for p in shorts if p.call)
        call_need = sum(n for n, p in zip(need, shorts, strict=True) if p.call)
        covered = min(1.0, self.shares / call_shares) if call_shares else 0.0
        covered = 1.0 if covered >= 1 - 1e-9 else covered  # shares within a billionth (rounding) cover them all
        self.seen.covered_marks += covered > 0 and call_need > 0
        return sum(need) - covered * call_need

    def notional_limit(self, fill: Point) -> float:
        """The contracts env.max_order_notional of equity holds in notional at the fill's spot (inf: no cap)."""
        if self.e.max_order_notional <= 0:
            return math.inf
        return self.count(self.e.max_order_notional * self.equity / (fill.spot * self.m.multiplier))

    def open(self, quote: Quote, fill: Point, sell: bool) -> None:
        """Size: position_frac of equity in premium at the one-contract ask (whole; fractional: the quoted ask) for
        a buy or in margin at the fill for a sale, at most max_volume_share of the strike's volume proxy; then as
        many as the cash room carries: the ask (a buy) or the margin less the bid (a sale) of the sized order, plus
        each contract's fees."""
        m, c, mid, half, volume = self.m, self.c, quote.mid, quote.half, quote.volume
        if sell:
            unit = self.sale_unit(quote, fill)
        else:
            sized_at = 1.0 if self.whole else 0.0  # one whole contract's ask, or the quoted ask (fractional)
            unit = self.mk.fill_price(mid, half, self.impact(sized_at, volume), sell=False) * m.multiplier
        by_equity = self.count(self.e.position_frac * self.equity / max(unit, 1e-12))
        by_notional = self.notional_limit(fill)
        self.seen.notional_bound += by_notional < by_equity
        by_equity = min(by_equity, by_notional)
        cap = self.count(c.max_volume_share * volume)
        covered = self.free_cover() if sell and quote.call else 0  # covered calls need no margin
        wanted = min(max(by_equity, covered), cap)
        if sell:
            bid = self.mk.fill_price(mid, half, self.impact(wanted, volume), sell=True)
            need = self.mk.margin(mid, fill.spot, quote.strike, quote.call) * m.multiplier - bid * m.multiplier \
                + self.round_trip_fees(minimum=False)
        else:
            need = self.mk.fill_price(mid, half, self.impact(wanted, volume), sell=False) * m.multiplier \
                + self.round_trip_fees(minimum=False)
        by_room = covered + self.count(max(self.cash_room() / max(need, 1e-12), 0.0))
        contracts = min(wanted, by_room)
        free = [i for i, p in enumerate(self.slots) if p is None]
        if contracts < self.least(fill.spot * m.multiplier) or not free:
            self.seen.rejected += 1
            return
        if sell:
            self.seen.sales += 1
            self.seen.room_bound_sales += by_room < wanted
        else:
            self.seen.buys += 1
            self.seen.capped_buys += contracts == cap < by_equity
        self.seen.same_bar_buys += quote.expiry_bar == self.t + 1
        dollars = self.trade(mid, half, contracts, volume, sell=sell)  # in for a sale, out for a buy
        self.cash += dollars if sell else -dollars
        self.slots[free[0]] = Position(quote.call, quote.strike, quote.listed_day, quote.expiry_bar,
                                       quote.expiry_time, contracts, -dollars if sell else dollars, short=sell)

    # ---------------------------------------------------------------- what the copy observes at t

    def free_cover(self) -> float:
        """Call contracts the shares can still cover: shares not already under a short call, per contract."""
        under_calls = sum(p.contracts for p in self.open_positions() if p.short and p.call) * self.m.multiplier
        return self.count(max((self.shares - under_calls) / self.m.multiplier, 0.0))

    def covers(self, quote: Quote) -> bool:
        """Whether the shares not yet under a short call cover the smallest order of this call (no margin
        call)."""
        smallest = self.least(self.mk.close[self.t] * self.m.multiplier)
        return quote.call and self.free_cover() >= smallest and not self.margin_call()

    def mask(self) -> list[bool]:
        """Valid actions at t, judged on t's chain at t's close: hold; a buy if a slot is free, the bar is calm
        and one contract at the ask with its buying and closing fees fits the cash room and position_frac of
        equity; a sale if a slot is free, the bar is calm, one contract's margin fits position_frac of equity and
        its margin less its bid, with the fees, fits the cash room; either (a covered call aside) only if one
        contract's notional fits env.max_order_notional of equity, where that is set; a target that changes the
        holding (down always, up when calm and one share fits the room); close-all if an option or a share is
        held; close worst/best if an option is held."""
        lay, t, held, mult = self.layout, self.t, len(self.open_positions()), self.m.multiplier
        fees, room, budget = self.round_trip_fees(minimum=True), self.cash_room(), self.e.position_frac * self.equity
        calm = not self.mk.turbulent[t]
        can_open = held < self.e.max_positions and calm
        at, buys, sales = self.mk.close_point(t), [], []
        cap = self.e.max_order_notional
        n = self.least(at.spot * mult)  # the smallest order's contracts: 1, or fractional dust
        in_cap = cap <= 0 or at.spot * mult * n <= cap * self.equity  # the smallest order's notional
        self.seen.notional_masked += can_open and not in_cap
        for index in range(2 * len(lay.grid)):
            quote = self.mk.quote(index, lay.grid, t, at, t)
            one = self.impact(1.0, quote.volume)
            ask = self.mk.fill_price(quote.mid, quote.half, one, sell=False) * mult
            if self.whole:  # one contract's ask and fees within both
                buys.append(can_open and in_cap and ask + fees <= min(room, budget))
            else:  # the premium within the budget, the premium and fees within the room
                buys.append(can_open and in_cap and ask * n <= budget and (ask + fees) * n <= room)
            margin = self.mk.margin(quote.mid, at.spot, quote.strike, quote.call) * mult
            bid = self.mk.fill_price(quote.mid, quote.half, one, sell=True) * mult
            covered = self.covers(quote)
            self.seen.covered_past_cap += can_open and covered and not in_cap
            sales.append(can_open and (covered or (in_cap and margin * n <= budget
                                                   and (margin - bid + fees) * n <= room)))
        targets = []
        for target in lay.targets:
            wanted = max(self.count(target * self.equity / at.spot), 0.0)
            least = self.least(at.spot)
            one_share = at.spot * (1 + self.c.share_cost_bps / 1e4) * least
            targets.append(wanted <= self.shares - least or (wanted >= self.shares + least and calm
                                                              and one_share <= room))
        return [True, *buys, *(sales if lay.allow_short else []), *targets, held > 0 or self.shares > 0,
                held > 0, held > 0]

    def portfolio(self) -> list[float]:
        """The observation's portfolio features at t (clstm_ppo.env.PORTFOLIO_FEATURES, in that order)."""
        held, spot, mult = self.open_positions(), self.mk.close[self.t], self.m.multiplier
        net = [sum(p.side * p.greeks[k] * p.contracts * mult for p in held) for k in range(4)]
        stock = self.shares * spot  # the underlying's delta is 1 a share
        dollar_greeks = [net[0] * spot + stock, net[1] * spot * spot * 1e-4, net[2] * 0.01, net[3] / YEAR_DAYS]
        days = sum(p.expiry_time - self.mk.close_time[self.t] for p in held) / max(len(held), 1)
        return [self.cash / self.equity, len(held) / self.e.max_positions, *(g / self.equity for g in dollar_greeks),
                sum(p.mark - p.entry_cost for p in held) / self.equity, days / max(self.m.expiries_days),
                float(self.mk.turbulent[self.t]), self.equity / self.e.initial_cash - 1,
                (self.t - self.t_start) / max(self.t_end - self.t_start, 1), self.margin / self.equity,
                stock / self.equity]

    def settle(self, slot: int, cash_in: float) -> None:
        self.cash += cash_in
        self.closed += 1
        self.wins += cash_in > self.slots[slot].entry_cost
        self.slots[slot] = None

    def open_positions(self) -> list[Position]:
        return [p for p in self.slots if p is not None]
