"""The series the option market reads: the real VIX and T-bill joined by date, the fitted implied-vol model,
stale opens, dividends; and what a quant checks first: nothing fitted after the training split, implied vol
not predictable from the window's drop-outs, falling on rallies."""
import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import torch
from market_fixtures import handmade_market
from reference_env import black_scholes

from clstm_ppo.config import DataConfig, EnvConfig, MarketConfig
from clstm_ppo.data import build_market_data, load_bars
from clstm_ppo.data.builtin import tbill_to_continuous
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.market.inputs import fit_iv_model, market_inputs


def test_the_embedded_sp500_carries_the_real_vix_and_t_bill_joined_by_date(sp500_data):
    dates = pd.DatetimeIndex(sp500_data.dates)
    vix = pd.read_csv("clstm_ppo/data/embedded/vix_daily_1990_2018.csv.gz", parse_dates=["Date"]).set_index("Date")
    for day, close in (("2008-11-20", 80.86), ("2017-11-03", 9.14), ("2004-11-05", 13.84)):
        assert sp500_data.bars["iv"][0, dates.get_loc(pd.Timestamp(day))] == pytest.approx(close / 100)
        assert vix.loc[day, "Close"] == pytest.approx(close)
    # 2004-11-08's VIX open (2.58) lies outside that day's range: the open used is the close before it.
    assert sp500_data.bars["iv_open"][0, dates.get_loc(pd.Timestamp("2004-11-08"))] == pytest.approx(0.1384)
    assert sp500_data.bars["iv_open"][0, dates.get_loc(pd.Timestamp("2016-06-24"))] == pytest.approx(
        vix.loc["2016-06-24", "Open"] / 100)
    # DTB3 on 2007-01-03 was 4.92 (discount basis): ln(1 / (1 - 0.0492 * 91/360)) * 365/91.
    expected = -math.log(1 - 0.0492 * 91 / 360) * 365 / 91
    assert sp500_data.bars["rate"][0, dates.get_loc(pd.Timestamp("2007-01-03"))] == pytest.approx(expected, rel=1e-9)
    # 5% discount: price 1 - 0.05 * 91/360 = 0.987361, so ln(1 / 0.987361) * 365/91 = 0.0510175.
    assert tbill_to_continuous(np.array([5.0]))[0] == pytest.approx(0.0510175, abs=1e-7)
    inputs = market_inputs(sp500_data, MarketConfig())
    assert inputs.iv_source == "column" and inputs.dividend_yield[0] == MarketConfig().dividend_yield


def test_the_shipped_model_coefficients_are_the_fit_on_the_training_split(sp500_data):
    coefs = fit_iv_model(sp500_data, MarketConfig())
    np.testing.assert_allclose(coefs, MarketConfig().iv_model_coefs, atol=1e-3)
    assert coefs[1] > 0 and coefs[2] < 0, "vol rises with realised vol and falls after rallies"


def _window_dropout_correlation(iv: np.ndarray, returns: np.ndarray, window: int) -> float:
    """The largest |corr| between the return leaving a ``window``-bar window at t+1 (signed, absolute or
    squared) and the change of log IV from t to t+1."""
    leaving = returns[: -window]  # r[t+1-window] leaves the window that ends at t+1
    change = np.diff(np.log(iv))[window - 1:]
    return max(abs(float(np.corrcoef(f(leaving), change)[0, 1])) for f in (np.asarray, np.abs, np.square))


@pytest.mark.parametrize("source", ["column", "model"])
def test_tomorrows_implied_vol_is_not_predictable_from_the_window_and_falls_on_rallies(sp500_data, source):
    iv = market_inputs(sp500_data, MarketConfig(iv_source=source)).iv_close[0]
    returns = sp500_data.raw_features[0, :, sp500_data.feature_names.index("log_return")]
    for window in (5, 10, 20, 30, 60):
        assert _window_dropout_correlation(iv, returns, window) < 0.1, window
    assert np.corrcoef(returns[1:], np.diff(np.log(iv)))[0, 1] < -0.4
    # The old model (20-bar realised vol x a premium) fails the first check: the test has teeth.
    boxcar = sp500_data.bars["realized_vol"][0] * 1.38
    assert _window_dropout_correlation(boxcar, returns, 20) > 0.3


def _sp500_frame() -> pd.DataFrame:
    frame = load_bars("sp500")["SPX"]
    return frame[["date", "open", "high", "low", "close", "volume", "iv", "rate"]].rename(columns={"date": "Date"})


def test_changing_validation_and_test_bars_changes_no_calibration_and_no_training_price(tmp_path):
    frame = _sp500_frame()
    later = frame["Date"] > "2012-12-31"
    rng = np.random.default_rng(0)
    altered = frame.copy()
    altered.loc[later, ["open", "high", "low", "close"]] *= np.exp(np.cumsum(rng.normal(0, 0.03, later.sum())))[:, None]
    altered.loc[later, "iv"] *= 1.7
    altered.loc[later, "rate"] += 0.03
    settings = dict(train_end="2012-12-31", val_end="2015-12-31")
    datas = []
    for name, table in (("real", frame), ("altered", altered)):
        table.to_csv(tmp_path / f"{name}.csv", index=False)
        datas.append(build_market_data(DataConfig(source=str(tmp_path / f"{name}.csv"), **settings)))
    real, alt = datas
    train = slice(*real.splits["train"])
    assert real.splits == alt.splits
    np.testing.assert_array_equal(fit_iv_model(real, MarketConfig()), fit_iv_model(alt, MarketConfig()))
    for source in ("column", "model"):
        market = MarketConfig(iv_source=source)
        a, b = market_inputs(real, market), market_inputs(alt, market)
        np.testing.assert_array_equal(a.long_run_iv, b.long_run_iv)
        np.testing.assert_array_equal(a.iv_close[:, train], b.iv_close[:, train])
        envs = [BatchedOptionsEnv(d, "train", market, EnvConfig(dtype="float64"), num_envs=1) for d in datas]
        qa, qb = envs[0].quotes, envs[1].quotes
        for table in ("fill_mid", "fill_half_spread", "fill_volume", "close_ask"):
            torch.testing.assert_close(getattr(qa, table)[:, train], getattr(qb, table)[:, train], rtol=0, atol=0,
                                       msg=f"{source} {table}")
        assert not torch.equal(qa.fill_mid[:, train.stop:], qb.fill_mid[:, train.stop:]), "the later bars did change"


def test_a_rate_change_moves_a_call_by_its_rho():
    data = handmade_market(np.full(60, 100.2), iv=0.2)
    data.bars["open"] = np.full((1, 60), 100.0)  # not the previous close: fills at the open
    market = MarketConfig(moneyness=[1.0], expiries_days=[30], term_reversion=0.0, atm_per_iv=1.0)
    mids = []
    for rate in (0.03, 0.0301):
        data.bars["rate"] = np.full((1, 60), rate)
        env = BatchedOptionsEnv(data, "train", market, EnvConfig(dtype="float64"), num_envs=1)
        mids.append(env.quotes.fill_mid[0, 10, 0].item())  # a call bought at bar 10's open
    # Textbook rho = K tau e^{-r tau} N(d2), at the fill's time to expiry (30 days + 6.5 hours at the open).
    tau, spot, strike, vol, q = (30 + 6.5 / 24) / 365, 100.0, 100.0, 0.2, market.dividend_yield
    d2 = (math.log(spot / strike) + (0.03 - q - 0.5 * vol * vol) * tau) / (vol * math.sqrt(tau))
    rho = strike * tau * math.exp(-0.03 * tau) * 0.5 * math.erfc(-d2 / math.sqrt(2))
    assert (mids[1] - mids[0]) / 0.0001 == pytest.approx(rho, rel=1e-3)
    assert mids[0] == pytest.approx(black_scholes(spot, strike, tau, 0.03, q, vol, True), rel=1e-12)


def test_dividend_yield_is_zero_where_adj_close_put_dividends_into_the_prices(tmp_path):
    from conftest import make_bars

    bars = make_bars(600)
    bars["Adj Close"] = bars["Close"] * np.linspace(0.9, 1.0, len(bars))
    bars.to_csv(tmp_path / "adj.csv", index=False)
    make_bars(600).to_csv(tmp_path / "plain.csv", index=False)
    for name, expected in (("adj", 0.0), ("plain", MarketConfig().dividend_yield)):
        data = build_market_data(DataConfig(source=str(tmp_path / f"{name}.csv"), vol_window=10))
        assert market_inputs(data, MarketConfig()).dividend_yield[0] == expected


def test_a_file_without_iv_uses_the_model_floored_at_its_training_minimum(tmp_path):
    from conftest import make_bars

    make_bars(900).to_csv(tmp_path / "bars.csv", index=False)
    data = build_market_data(DataConfig(source=str(tmp_path / "bars.csv")))
    inputs = market_inputs(data, MarketConfig())
    train = slice(*data.splits["train"])
    assert inputs.iv_source == "model"
    assert inputs.iv_close.min() == pytest.approx(inputs.iv_close[:, train].min())
    with pytest.raises(ValueError, match="no iv/vix column"):
        market_inputs(data, MarketConfig(iv_source="column"))
    assert dataclasses.replace(MarketConfig(), iv_source="model").iv_source == "model"
