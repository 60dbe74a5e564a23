"""References that each break one rule of docs/MARKET.md (section 1): the agreement with the batched env must
fail for each, so the agreement tests (test_env_reference.py) can tell the rules apart."""
import copy
import dataclasses
import math

import pytest
import torch
from reference_agreement import (
    INTRADAY_ACCOUNT,
    INTRADAY_MARKET,
    NOTIONAL_CAP,
    SELLS,
    SP500_MARGIN,
    SP500_STARTS,
    agree_with_reference,
    intraday_market,
)
from reference_env import Point, ReferenceCopy, ReferenceMarket

from clstm_ppo.config import MarketConfig

ATM_YEARS = 30 / 365


class OpensEvenWhenStale(ReferenceMarket):
    def fill_point(self, u):
        return Point(self.open[u], self.iv_open[u], self.rate[u - 1], self.open_time[u])


class ExpiresOnCalendarDays(ReferenceMarket):
    """Expires at the first bar on or after the listed day, not the last one on or before it."""
    def expiry(self, u, days):
        listed, bar, time = super().expiry(u, days)
        if bar is not None and self.day[bar] < listed:
            bar += 1
            time = self.close_time[bar]
        return listed, bar, time


class CountsDaysToTheListedDay(ReferenceMarket):
    def expiry(self, u, days):
        listed, bar, _ = super().expiry(u, days)
        return listed, bar, self.close_time[u] + days


class RateOfTheFillDay(ReferenceMarket):
    def fill_point(self, u):
        point = super().fill_point(u)
        point.rate = self.rate[u]
        return point


class VolOfThePreviousClose(ReferenceMarket):
    def fill_point(self, u):
        point = super().fill_point(u)
        point.atm = point.atm if point.stale else self.iv_close[u - 1]
        return point


class OpensAtThePreviousClose(ReferenceMarket):
    def __init__(self, *args):
        super().__init__(*args)
        self.open_time = [self.close_time[0], *self.close_time[:-1]]


class VolumeOfTheFillBar(ReferenceMarket):
    def strike_volume(self, t, strike, spot, years):
        return super().strike_volume(t + 1, strike, spot, years)


class FlatTermStructure(ReferenceMarket):
    def atm_at(self, atm30, years):
        return atm30


class SkewNotScaledByMaturity(ReferenceMarket):
    def vol(self, atm30, strike, spot, years):
        return super().vol(atm30, strike, spot, ATM_YEARS)


class OneSkewForBothWings(ReferenceMarket):  # the surface before 2026-11-27
    def __init__(self, *args):
        super().__init__(*args)
        self.m = dataclasses.replace(self.m, iv_call_skew=self.m.iv_skew)


class NoWings(ReferenceMarket):
    def __init__(self, *args):
        super().__init__(*args)
        self.m = dataclasses.replace(self.m, iv_wing_z=math.inf)


class NoVolumeCap(ReferenceMarket):
    def __init__(self, *args):
        super().__init__(*args)
        self.c = copy.copy(self.c)
        object.__setattr__(self.c, "max_volume_share", 1e9)  # past the setting's limit on purpose: no cap


class StockRatesForTheIndex(ReferenceMarket):
    def __init__(self, data, market, sym):
        super().__init__(data, market, sym)
        self.margin_a, self.margin_b = market.stock_margin


class QuotesOffTheTickGrid(ReferenceMarket):
    def __init__(self, data, market, sym):
        super().__init__(data, market, sym)
        self.ticks = [0.0, 0.0]


class StockTicksForTheIndex(ReferenceMarket):
    def __init__(self, data, market, sym):
        super().__init__(data, market, sym)
        self.ticks = market.costs.stock_ticks


class OneTickAtEveryPrice(ReferenceMarket):
    """The small tick above tick_break too ($0.05 for a $25 SPX option, where Cboe quotes it in dimes)."""
    def __init__(self, data, market, sym):
        super().__init__(data, market, sym)
        self.ticks = [self.ticks[0], self.ticks[0]]


# References whose account, not whose market, breaks a rule.
class ForgetsTheDividend(ReferenceCopy):
    def carry(self, t, u):
        years = (self.mk.close_time[u] - self.mk.close_time[t]) / 365.0
        self.cash *= math.exp(self.mk.rate[t] * years)


class PaysNoInterest(ReferenceCopy):
    def carry(self, t, u):
        years = (self.mk.close_time[u] - self.mk.close_time[t]) / 365.0
        self.cash += self.shares * self.mk.close[t] * math.expm1(self.mk.q * years)


class InterestAtTheFillBarsRate(ReferenceCopy):
    def carry(self, t, u):
        years = (self.mk.close_time[u] - self.mk.close_time[t]) / 365.0
        self.cash = self.cash * math.exp(self.mk.rate[u] * years) \
            + self.shares * self.mk.close[t] * math.expm1(self.mk.q * years)


class NoCoveredCallOffset(ReferenceCopy):
    def margin_at_close(self):
        shares, self.shares = self.shares, 0.0
        try:
            return super().margin_at_close()
        finally:
            self.shares = shares


class MarginCallClosesLongsToo(ReferenceCopy):
    def called(self, p):
        return True


class MarginCallOnEquity(ReferenceCopy):
    def margin_call(self):
        return self.equity < self.margin


class BuysBackAtTheBid(ReferenceCopy):
    """Pays the bid side (mid less the half spread, plus slippage) to buy a short back, not the ask."""
    def close_at(self, p, fill, t):
        if not p.short:
            return super().close_at(p, fill, t)
        mk = self.mk
        mid, vol = mk.price(p.call, p.strike, p.expiry_time, fill)
        volume = mk.strike_volume(t, p.strike, fill.spot, mk.years(p.expiry_time, fill.time))
        half = mk.half_spread(mid, vol, p.strike, fill.spot)
        return -self.trade(mid, -half, p.contracts, volume, sell=False)


class SaleSizedByItsPremium(ReferenceCopy):
    def sale_unit(self, quote, fill):
        return quote.mid * (1 - quote.half) * self.m.multiplier


class SharesBeyondTheCashRoom(ReferenceCopy):
    def share_cap(self, price, bps):
        return self.shares + math.floor(max(self.cash, 0.0) / (price * (1 + bps)))


MUTANTS = [OpensEvenWhenStale, ExpiresOnCalendarDays, CountsDaysToTheListedDay, RateOfTheFillDay, VolOfThePreviousClose,
           OpensAtThePreviousClose, VolumeOfTheFillBar, FlatTermStructure, SkewNotScaledByMaturity, OneSkewForBothWings,
           NoWings, NoVolumeCap, StockRatesForTheIndex, QuotesOffTheTickGrid, StockTicksForTheIndex,
           OneTickAtEveryPrice, ForgetsTheDividend, PaysNoInterest, InterestAtTheFillBarsRate,
           NoCoveredCallOffset, MarginCallClosesLongsToo, MarginCallOnEquity, BuysBackAtTheBid, SaleSizedByItsPremium,
           SharesBeyondTheCashRoom]


# 30- and 60-day S&P 500 strikes stay inside the wings: only the intraday market's 1-day strikes reach them.
CASES = [(market, mutant) for mutant in MUTANTS for market in ("sp500", "intraday")
         if not (market == "sp500" and mutant is NoWings)]


@pytest.mark.parametrize("market_name, mutant", CASES, ids=lambda x: getattr(x, "__name__", x))
def test_a_reference_that_breaks_one_rule_no_longer_agrees(sp500_data, market_name, mutant):
    """On the S&P 500 a $300,000 account that sells often (margin calls come within the 40 bars), on the intraday
    market its account with 32 copies (16 at random starts saw no margin call on a long), over 40 bars."""
    args = ((sp500_data, MarketConfig(), SP500_MARGIN, 40, 16, torch.linspace(1500, 1880, 16).round().long())
            if market_name == "sp500" else (intraday_market(), INTRADAY_MARKET, INTRADAY_ACCOUNT, 40, 32))
    which = {"reference_copy" if issubclass(mutant, ReferenceCopy) else "reference_market": mutant}
    with pytest.raises(AssertionError):
        agree_with_reference(*args, weights=SELLS, **which)


class NoNotionalCapOnOrders(ReferenceCopy):
    def notional_limit(self, fill):
        return math.inf


class NotionalAtTheClose(ReferenceCopy):
    def notional_limit(self, fill):
        return math.floor(self.e.max_order_notional * self.equity / (self.mk.close[self.t] * self.m.multiplier))


class CapsCoveredCallsToo(ReferenceCopy):
    def covers(self, quote):
        in_cap = self.mk.close[self.t] * self.m.multiplier <= self.e.max_order_notional * self.equity
        return super().covers(quote) and in_cap


class FloorsFractionalOrders(ReferenceCopy):
    """Whole contracts and shares under market.sizing fractional (the market before fractional sizing)."""
    def count(self, size):
        return float(math.floor(size))


class ProRataOrderMinimum(ReferenceCopy):
    """A 0.4-contract order pays 0.4 of the per-order commission minimum, not all of it."""
    def trade(self, mid, half, contracts, volume, sell):
        minimum = self.c.commission_min_per_order
        self.c = dataclasses.replace(self.c, commission_min_per_order=minimum * min(contracts, 1.0))
        try:
            return super().trade(mid, half, contracts, volume, sell)
        finally:
            self.c = dataclasses.replace(self.c, commission_min_per_order=minimum)


# The cap cuts most orders on $300,000 to about one contract of the index: fractions of one, under fractional sizing.
@pytest.mark.parametrize("mutant", [NoNotionalCapOnOrders, NotionalAtTheClose, CapsCoveredCallsToo,
                                    FloorsFractionalOrders, ProRataOrderMinimum],
                         ids=lambda m: m.__name__)
def test_a_reference_that_breaks_the_notional_cap_no_longer_agrees(sp500_data, mutant):
    """The cap sizes an order at its fill's spot (t+1's open, or its close after a stale open), not t's close, and
    leaves covered calls alone (the shares already hold their notional)."""
    with pytest.raises(AssertionError):
        agree_with_reference(sp500_data, MarketConfig(), NOTIONAL_CAP, starts=SP500_STARTS,
                             reference_copy=mutant, weights=SELLS)
