"""CBOE PutWrite and BuyWrite simulated in the market: hand-made months whose cash flows are computed here
independently (Black-Scholes by math.erf, the documented spread and fee rules), then the embedded S&P 500
against the real PUT and BXM indices over the training years."""
import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from market_fixtures import handmade_market

from clstm_ppo.backtest.cboe import REAL_ANNUAL_RETURNS, REAL_YEARS, _schedule, buywrite, monthly_expiry_table, putwrite
from clstm_ppo.backtest.report import yearly_metrics
from clstm_ppo.backtest.walk import buy_and_hold
from clstm_ppo.config import Config, CostConfig, DataConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.env.quotes import market_clock
from clstm_ppo.market import COST_KINDS

EXPIRY = 51  # handmade days start 2020-01-01: a sale on Jan 4 lists the third Friday of February, Feb 21


def market(close, fresh_opens=(), rate=None, iv=0.2):
    """One underlying, daily bars from 2020-01-01 opening at the previous close (stale: fills at the close),
    except bars in ``fresh_opens``, which open 0.1% higher (a traded open: fills there)."""
    data = handmade_market(np.asarray(close, dtype=np.float64), iv=iv)
    bars = dict(data.bars)
    bars["open"] = bars["open"].copy()
    for t in fresh_opens:
        bars["open"][0, t] = bars["close"][0, t - 1] * 1.001
    if rate is not None:
        bars["rate"] = np.asarray(rate, dtype=np.float64)[None]
    return dataclasses.replace(data, bars=bars)


def config(**market) -> Config:
    cfg = Config()
    values = {"atm_per_iv": 1.0, "dividend_yield": 0.0, "risk_free_rate": 0.03} | market
    return dataclasses.replace(cfg, market=dataclasses.replace(cfg.market, **values))


def bs_put(s, k, t, r, sigma):
    n = lambda x: 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))  # noqa: E731
    d1 = (math.log(s / k) + (r + 0.5 * sigma ** 2) * t) / (sigma * math.sqrt(t))
    return k * math.exp(-r * t) * n(-(d1 - sigma * math.sqrt(t))) - s * n(-d1)


def first_put_month(close_at_expiry: float, rate: float = 0.03) -> tuple[float, float]:
    """(expected equity at the expiry bar's close, premium net of fees) of the first put sold on a handmade
    market that is flat at 100 to its fill bar 3 (the walk starts at bar 2, its window's last bar)."""
    cash = 1e6 * math.exp(rate * 1 / 365)  # bar 2's close to bar 3's
    c = cash / (100.0 * 100)  # notional = the account: fractional contracts
    years = (EXPIRY - 3) / 365
    mid = bs_put(100.0, 100.0, years, rate, 0.2)
    spread = min(max(0.03 * (1 + min(max(1 - mid / 2.0, 0), 1)), 0.02), 0.10)  # iv 20%: no high-vol widening
    volume = 1e9 * 1e-4 * 30 / (EXPIRY - 3)  # the volume proxy, beyond 30 days
    raw_bid = mid * (1 - spread / 2)
    bid = math.floor(raw_bid / 0.01 + 1e-6) * 0.01  # handmade data is no index: a stock's grid, pennies below $3
    assert raw_bid < 3.0 and bid < raw_bid
    gross = c * 100 * (bid - mid * 0.5 * c / volume)
    fees = max(0.65 * c, 1.0) + (0.025 + 0.00279 + 0.02) * c + gross * 27.80e-6
    grown = math.exp(rate * years)
    return (cash + gross - fees) * grown - c * 100 * max(100.0 - close_at_expiry, 0.0), gross - fees


def test_the_monthly_expiry_is_the_third_friday_at_least_three_weeks_away():
    dates = pd.DatetimeIndex(["2020-01-04", "2020-01-17", "2020-01-20", "2020-03-20"])
    days = pd.date_range("2020-01-01", "2020-06-30", freq="D")
    bars, _ = monthly_expiry_table(days.values, market_clock(days.values)[0])
    listed = [days[bars[days.get_loc(d)]].date().isoformat() for d in dates]
    assert listed == ["2020-02-21", "2020-02-21", "2020-02-21", "2020-04-17"]
    # Good Friday 2014 (April 18) had no trading: that month's options expire on the Thursday
    open_days = pd.bdate_range("2014-03-01", "2014-06-30").drop(pd.Timestamp("2014-04-18"))
    bars, _ = monthly_expiry_table(open_days.values, market_clock(open_days.values)[0])
    assert open_days[bars[open_days.get_loc(pd.Timestamp("2014-03-21"))]].date().isoformat() == "2014-04-17"


def test_a_putwrite_month_in_a_flat_market_keeps_the_premium_less_costs_plus_interest():
    data = market(np.full(EXPIRY + 1, 100.0), fresh_opens=[EXPIRY])  # no new sale on the last bar
    result = putwrite(data, "train", config())
    expected, net_premium = first_put_month(100.0)
    assert data.dates[EXPIRY].date().isoformat() == "2020-02-21"
    assert result.equity[0, 0] == 1e6 and result.equity[0, -1] == pytest.approx(expected, rel=1e-10)
    assert result.equity[0, -1] > 1e6 * math.exp(0.03 * (EXPIRY - 2) / 365) + 0.9 * net_premium
    assert result.closed[0] == 1 and result.wins[0] == 1 and result.open_at_end[0] == 0
    fees = result.costs[0, COST_KINDS.index("commission"):COST_KINDS.index("shares")].sum()
    assert result.traded[0] - fees == pytest.approx(net_premium, rel=1e-10)


def test_a_falling_market_pays_the_puts_intrinsic_value_at_expiry():
    close = np.concatenate([np.full(4, 100.0), np.linspace(100.0, 90.0, EXPIRY - 2)[1:]])
    result = putwrite(market(close, fresh_opens=[EXPIRY]), "train", config())
    assert close[EXPIRY] == 90.0 and result.equity[0, -1] == pytest.approx(first_put_month(90.0)[0], rel=1e-10)
    assert result.closed[0] == 1 and result.wins[0] == 0  # a 10-point fall costs more than the premium


@pytest.mark.parametrize("stale", [True, False])
def test_rolls_come_at_the_first_fill_on_or_after_each_expiry(stale):
    """A stale open fills at its bar's close: the expiry's own close, as the old put settles (CBOE sells on
    expiry day). A traded open comes before the close it expires at: the roll waits for the next bar."""
    n = 130  # expiries Feb 21, Mar 20, Apr 17 2020 (bars 51, 79, 107); the last option outlives the data
    data = market(np.full(n, 100.0), fresh_opens=[] if stale else range(1, n))
    cfg = config()
    result = putwrite(data, "train", cfg)
    clock = market_clock(data.dates.values)[0]
    bars, times = monthly_expiry_table(data.dates.values, clock)
    fill_time = clock if stale else clock - 6.5 / 24
    fills, expiries = _schedule(2, n - 1, bars, times, fill_time)
    assert list(expiries[:3]) == [51, 79, 107]
    assert list(fills) == ([3, 51, 79, 107] if stale else [3, 52, 80, 108])
    assert result.closed[0] == 3 and result.open_at_end[0] == 1


def test_the_buywrites_upside_is_capped_by_its_short_call():
    close = np.concatenate([np.full(4, 100.0), np.linspace(100.0, 120.0, EXPIRY - 2)[1:]])
    data, cfg = market(close, fresh_opens=[EXPIRY]), config(risk_free_rate=0.0)
    result, held = buywrite(data, "train", cfg), buy_and_hold(data, "train", cfg)
    assert held.equity[0, -1] / 1e6 - 1 > 0.19
    # shares N and N/100 calls struck at 100: at expiry N x 120 - N x (120 - 100) = N x 100, what they cost
    fees = result.costs[0, COST_KINDS.index("commission"):COST_KINDS.index("shares")].sum()
    share_cost = result.costs[0, COST_KINDS.index("shares")]
    assert result.equity[0, -1] == pytest.approx(1e6 + result.traded[0] - fees - share_cost, rel=1e-10)
    assert 0.02 < result.equity[0, -1] / 1e6 - 1 < 0.05  # the premium, about 2.8% at 20% vol for 48 days
    assert result.closed[0] == 1 and result.wins[0] == 0 and result.open_at_end[0] == 1  # the shares


def test_with_no_premium_and_no_fees_cash_grows_exactly_at_the_rate_series():
    n = 100
    rate = 0.02 + 0.03 * np.sin(np.arange(n) / 7.0) ** 2
    free = CostConfig(commission_per_contract=0.0, commission_min_per_order=0.0, occ_clearing_per_contract=0.0,
                      finra_taf_per_contract=0.0, sec_fee_per_million=0.0, orf_per_contract=0.0)
    cfg = config(min_iv=1e-8, costs=free)  # a zero-vol market: an at-the-money put is worth nothing
    result = putwrite(market(np.full(n, 100.0), rate=rate, iv=1e-8), "train", cfg)
    expected = 1e6 * np.exp(np.concatenate([[0.0], np.cumsum(rate[2:n - 1] / 365)]))  # one calendar day a bar
    np.testing.assert_allclose(result.equity[0], expected, rtol=1e-12)
    assert result.closed[0] == 2 and result.costs.sum() == 0


@pytest.fixture(scope="module")
def sp500_training_years():
    """The embedded S&P 500 walked from 1999-02-22 (the shortest warm-up; scripts/studies/cboe_benchmarks.py)."""
    data = build_market_data(DataConfig(source="sp500", turbulence_lookback=20, window=1))
    years = {name: yearly_metrics(run(data, "train", Config())) for name, run in (("putwrite", putwrite),
                                                                                  ("buywrite", buywrite))}
    return {name: {y: 100 * m[data.symbols[0]]["total_return"] for y, m in by_year.items()}
            for name, by_year in years.items()}


@pytest.mark.parametrize("name, real", [("putwrite", "PUT"), ("buywrite", "BXM")])
def test_the_simulated_indices_match_the_real_ones_over_the_training_years(sp500_training_years, name, real):
    """Acceptance: MAD <= 4 points a year and the same sign in >= 12 of the 14 training years 1999-2012 (1999
    from Feb 22 only, against the real full year), and as much over the 13 full years 2000-2012."""
    sim = sp500_training_years[name]
    assert sorted(sim) == list(REAL_YEARS)
    s, r = np.array([sim[y] for y in REAL_YEARS]), np.array(REAL_ANNUAL_RETURNS[real])
    assert np.abs(s - r).mean() <= 4.0 and (np.sign(s) == np.sign(r)).sum() >= 12
    assert np.abs(s - r)[1:].mean() <= 4.0 and (np.sign(s) == np.sign(r))[1:].sum() >= 11
