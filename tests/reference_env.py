"""One env copy written again in plain Python floats, a position list and SPEC section 4's formulas.

Nothing here is vectorised, slot-major, or shared with clstm_ppo's market and env code: Black-Scholes
uses math.erfc, strikes, vols, spreads, slippage and fees are written out from their definitions.
The batched env must agree with it step by step, observation and mask included (tests/test_env.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from clstm_ppo.config import EnvConfig, MarketConfig

NICE_STEPS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0)


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
class Position:
    call: bool
    strike: float
    days_left: float
    contracts: float
    entry_cost: float  # dollars paid, fees included
    mark: float = 0.0  # dollars at the last close
    greeks: tuple = (0.0, 0.0, 0.0, 0.0)  # per share at the last close


class ReferenceCopy:
    """One copy from a given start: ``step(action, t)`` trades at t+1's open and marks at t+1's close."""

    def __init__(self, bars: dict[str, np.ndarray], dates: np.ndarray, turbulent: np.ndarray, sym: int, t: int,
                 t_end: int, market: MarketConfig, env: EnvConfig):
        self.m, self.c, self.e = market, market.costs, env
        self.open, self.close = bars["open"][sym], bars["close"][sym]
        iv = bars["realized_vol"][sym] * market.iv_premium  # no iv column in the synthetic data
        self.atm_iv = np.clip(iv, market.min_iv, market.max_iv)
        self.option_volume = np.maximum(bars["volume"][sym] * self.c.option_volume_ratio, self.c.min_option_volume)
        self.dates, self.turbulent, self.t, self.t_start, self.t_end = dates, turbulent, t, t, t_end
        self.cash = self.equity = env.initial_cash
        self.slots: list[Position | None] = [None] * env.max_positions
        self.costs = dict.fromkeys(("spread", "slippage", "commission", "occ_clearing", "finra_taf", "sec_fee",
                                    "orf"), 0.0)
        self.closed = self.wins = 0

    # ---------------------------------------------------------------- market

    def vol(self, atm: float, strike: float, spot: float) -> float:
        return min(max(atm * (1.0 - self.m.iv_skew * math.log(strike / spot)), self.m.min_iv), self.m.max_iv)

    def half_spread(self, mid: float, vol: float, strike: float, spot: float) -> float:
        c = self.c
        cheap = min(max(1.0 - mid / c.spread_cheap_price, 0.0), 1.0) * c.spread_cheap_coef
        far = abs(math.log(strike / spot)) * c.spread_moneyness_coef
        stormy = max(vol - 0.20, 0.0) * c.spread_vol_coef
        quoted = c.spread_base * (1 + cheap) * (1 + far) * (1 + stormy)
        return 0.5 * min(max(quoted, c.spread_min), c.spread_max)

    def impact(self, contracts: float, volume: float) -> float:
        return min(self.c.slippage_coef * contracts / volume, self.c.max_slippage)

    def trade(self, mid: float, half: float, contracts: float, volume: float, sell: bool) -> tuple[float, float]:
        """(dollars in for a sale or out for a buy, fees included); adds every cost to its kind."""
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

    # ---------------------------------------------------------------- one bar

    def step(self, action: int, grid: list[tuple[float, float]], close_all: int, close_worst: int,
             close_best: int) -> float:
        m, c, t = self.m, self.c, self.t
        spot, volume = self.open[t + 1], self.option_volume[t]
        gap = (self.dates[t + 1] - self.dates[t]) / np.timedelta64(1, "D")
        for p in self.open_positions():
            p.days_left -= gap
        held = [i for i, p in enumerate(self.slots) if p is not None]
        if self.turbulent[t] or action == close_all:
            to_sell = held
        elif action in (close_worst, close_best) and held:
            pnl = [self.slots[i].mark - self.slots[i].entry_cost for i in held]
            target = min(pnl) if action == close_worst else max(pnl)
            to_sell = [held[pnl.index(target)]]  # the first slot among equals
        else:
            to_sell = []
        for i in to_sell:
            p = self.slots[i]
            vol = self.vol(self.atm_iv[t], p.strike, spot)
            mid = black_scholes(spot, p.strike, max(p.days_left, 0) / 365, m.risk_free_rate, m.dividend_yield, vol,
                                p.call)
            proceeds = self.trade(mid, self.half_spread(mid, vol, p.strike, spot), p.contracts, volume, sell=True)
            self.settle(i, proceeds)
        if 1 <= action <= 2 * len(grid):
            self.buy(action - 1, grid, spot, volume)
        close = self.close[t + 1]
        for i, p in enumerate(self.slots):
            if p is not None and p.days_left <= 0:  # expires at the close, at intrinsic, without fees
                self.settle(i, max((close - p.strike) if p.call else (p.strike - close), 0.0) * p.contracts
                            * m.multiplier)
        self.t = t + 1
        for p in self.open_positions():
            vol = self.vol(self.atm_iv[t + 1], p.strike, close)
            args = (close, p.strike, p.days_left / 365, m.risk_free_rate, m.dividend_yield, vol, p.call)
            p.mark = black_scholes(*args) * p.contracts * m.multiplier
            p.greeks = greeks(*args)
        before, self.equity = self.equity, self.cash + sum(p.mark for p in self.open_positions())
        return (self.equity - before) * self.e.reward_scale / self.e.initial_cash

    def quote(self, index: int, grid: list[tuple[float, float]], spot: float, atm: float) -> tuple:
        """(call, strike, days, mid, half spread) of chain point ``index`` (calls, then puts) at ``spot``."""
        m = self.m
        call, (moneyness, days) = index < len(grid), grid[index % len(grid)]
        step = max([s for s in NICE_STEPS if s <= 0.005 * spot] or [NICE_STEPS[0]]) if m.strike_step <= 0 \
            else m.strike_step
        strike = max(round(spot * moneyness / step) * step, step)
        vol = self.vol(atm, strike, spot)
        mid = black_scholes(spot, strike, days / 365, m.risk_free_rate, m.dividend_yield, vol, call)
        return call, strike, days, mid, self.half_spread(mid, vol, strike, spot)

    def mask(self, grid: list[tuple[float, float]]) -> list[bool]:
        """Valid actions at t: hold; a buy if a slot is free, the bar is calm and one contract (with its
        buying and closing fees, quoted at t's close) fits both the cash room and position_frac of equity;
        the three closes if anything is open."""
        c, t, held = self.c, self.t, len(self.open_positions())
        fees = 2 * (max(c.commission_per_contract, c.commission_min_per_order) + c.occ_clearing_per_contract
                    + c.orf_per_contract) + c.finra_taf_per_contract
        budget = min(self.cash_room(), self.e.position_frac * self.equity)
        buys = []
        for index in range(2 * len(grid)):
            *_, mid, half = self.quote(index, grid, self.close[t], self.atm_iv[t])
            one = mid * (1 + half + self.impact(1.0, self.option_volume[t])) * self.m.multiplier + fees
            buys.append(held < self.e.max_positions and not self.turbulent[t] and one <= budget)
        return [True, *buys, *[held > 0] * 3]

    def cash_room(self) -> float:
        """Cash left after every open position's closing-fee reserve and two per-order commission minimums."""
        c = self.c
        reserve = sum(max(c.commission_per_contract * p.contracts, c.commission_min_per_order)
                      + (c.occ_clearing_per_contract + c.finra_taf_per_contract + c.orf_per_contract) * p.contracts
                      for p in self.open_positions())
        return self.cash - reserve - 2 * c.commission_min_per_order

    def buy(self, index: int, grid: list[tuple[float, float]], spot: float, volume: float) -> None:
        m, c = self.m, self.c
        # at t+1's open the vol of t's close is known
        call, strike, days, mid, half = self.quote(index, grid, spot, self.atm_iv[self.t])
        first_ask = mid * (1 + half + self.impact(1.0, volume))
        wanted = math.floor(self.e.position_frac * self.equity / max(first_ask * m.multiplier, 1e-12))
        ask = mid * (1 + half + self.impact(wanted, volume))
        per_contract = ask * m.multiplier + 2 * (c.commission_per_contract + c.occ_clearing_per_contract
                                                 + c.orf_per_contract) + c.finra_taf_per_contract
        contracts = min(wanted, math.floor(max(self.cash_room() / max(per_contract, 1e-12), 0.0)))
        free = [i for i, p in enumerate(self.slots) if p is None]
        if contracts < 1 or not free:
            return
        cost = self.trade(mid, half, contracts, volume, sell=False)
        self.cash -= cost
        self.slots[free[0]] = Position(call, strike, days, contracts, cost)

    def portfolio(self) -> list[float]:
        """The observation's portfolio features at t (clstm_ppo.env.PORTFOLIO_FEATURES, in that order)."""
        held, spot, mult = self.open_positions(), self.close[self.t], self.m.multiplier
        net = [sum(p.greeks[k] * p.contracts * mult for p in held) for k in range(4)]
        dollar_greeks = [net[0] * spot, net[1] * spot * spot * 1e-4, net[2] * 0.01, net[3] / 365]
        days = sum(p.days_left for p in held) / max(len(held), 1)
        return [self.cash / self.equity, len(held) / self.e.max_positions, *(g / self.equity for g in dollar_greeks),
                sum(p.mark - p.entry_cost for p in held) / self.equity, days / max(self.m.expiries_days),
                float(self.turbulent[self.t]), self.equity / self.e.initial_cash - 1,
                (self.t - self.t_start) / max(self.t_end - self.t_start, 1)]

    def settle(self, slot: int, cash_in: float) -> None:
        self.cash += cash_in
        self.closed += 1
        self.wins += cash_in > self.slots[slot].entry_cost
        self.slots[slot] = None

    def open_positions(self) -> list[Position]:
        return [p for p in self.slots if p is not None]
