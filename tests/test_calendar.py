"""The bars' clock (clstm_ppo.data.calendar): interval and market hours read from the timestamps of hourly 24/5 FX,
15-minute 24/7 crypto and 5-minute exchange-hours stocks (with holes, a DST change and a missing day), and every
annualised figure against a plain pandas computation from the same timestamps."""
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import make_bars

from clstm_ppo.backtest.report import curve_metrics
from clstm_ppo.cli import run_cli
from clstm_ppo.config import Config, DataConfig, SyntheticConfig, load_config, to_dict
from clstm_ppo.data import build_market_data, load_bars
from clstm_ppo.data.__main__ import main as data_main
from clstm_ppo.data.calendar import detect_clock
from clstm_ppo.data.stale import market_stale_opens
from clstm_ppo.data.synthetic import synthetic_dates

NYSE_2017 = ["2017-01-02", "2017-01-16", "2017-02-20", "2017-04-14", "2017-05-29", "2017-07-04", "2017-09-04",
             "2017-11-23", "2017-12-25"]
YEAR = pd.Timedelta(days=365.25)


def fx_stamps() -> pd.DatetimeIndex:
    """Hourly closes of an FX week, Sunday 17:00 to Friday 17:00 in New York (so 21:00 or 22:00 UTC as DST
    changes), 2017, with a five-hour hole and Christmas Day missing."""
    hours = pd.date_range("2017-01-01 18:00", "2017-12-31 23:00", freq="h", tz="America/New_York")
    day, hour = hours.day_of_week, hours.hour
    shut = ((day == 4) & (hour > 17)) | (day == 5) | ((day == 6) & (hour <= 17))
    stamps = hours[~shut]
    stamps = stamps[~((stamps >= "2017-05-10 03:00-04:00") & (stamps < "2017-05-10 08:00-04:00"))]
    return stamps[stamps.normalize() != pd.Timestamp("2017-12-25", tz="America/New_York")]


def crypto_stamps(seed: int = 0) -> pd.DatetimeIndex:
    """15-minute closes around the clock in 2021, one bar in a hundred missing and a whole day of outage."""
    stamps = pd.date_range("2021-01-01", "2021-12-31 23:45", freq="15min", tz="UTC")
    keep = np.random.default_rng(seed).random(len(stamps)) > 0.01
    return stamps[keep & (stamps.normalize() != pd.Timestamp("2021-06-01", tz="UTC"))]


def stock_stamps(seed: int = 0) -> pd.DatetimeIndex:
    """5-minute closes of NYSE sessions (09:35..16:00 New York time) in 2017: its holidays, two early closes at
    13:00, a day missing from the file and one bar in two hundred missing."""
    days = pd.bdate_range("2017-01-01", "2017-12-31")
    days = days[~days.isin(pd.to_datetime([*NYSE_2017, "2017-08-08"]))]
    closes = pd.timedelta_range("09:35:00", "16:00:00", freq="5min")
    stamps = pd.DatetimeIndex((days.values[:, None] + closes.values).ravel()).tz_localize("America/New_York")
    early = stamps.normalize().isin(pd.to_datetime(["2017-07-03", "2017-11-24"]).tz_localize("America/New_York"))
    stamps = stamps[~(early & ((stamps.hour * 60 + stamps.minute) > 13 * 60))]
    return stamps[np.random.default_rng(seed).random(len(stamps)) > 0.005]


# name -> (stamps, interval, hours, bars a day, bars a year)
MARKETS = {
    "fx_hourly": (fx_stamps, pd.Timedelta(hours=1), "24/5", 24, 24 * 260),
    "crypto_15min": (crypto_stamps, pd.Timedelta(minutes=15), "24/7", 95, 95 * 365),  # the holes: 95 of 96 a day
    "stocks_5min": (stock_stamps, pd.Timedelta(minutes=5), "exchange", 78, 78 * 252),
}


def write_bars(path, stamps: pd.DatetimeIndex, seed: int = 1, vol: float = 0.12, drift: float = 0.15) -> pd.DataFrame:
    """A random walk on ``stamps`` (written as the zoned timestamps a vendor gives) with about ``vol`` a year; each
    bar opens at the previous close."""
    rng = np.random.default_rng(seed)
    per_year = len(stamps) / ((stamps[-1] - stamps[0]) / YEAR)
    close = 100 * np.exp(np.cumsum(rng.normal(drift / per_year, vol / math.sqrt(per_year), len(stamps))))
    open_ = np.concatenate([[100.0], close[:-1]])
    frame = pd.DataFrame({"Date": stamps.astype(str), "Open": open_, "High": np.maximum(open_, close) * 1.0004,
                          "Low": np.minimum(open_, close) * 0.9996, "Close": close})
    frame.to_csv(path, index=False)
    return frame


@pytest.mark.parametrize("name", MARKETS)
def test_interval_and_hours_are_read_from_the_timestamps(tmp_path, name):
    stamps, interval, hours, per_day, per_year = MARKETS[name]
    stamps = stamps()
    write_bars(tmp_path / f"{name}.csv", stamps)
    clock = build_market_data(DataConfig(source=str(tmp_path / f"{name}.csv"))).clock
    assert (clock.interval, clock.hours, clock.bars_per_day) == (interval, hours, per_day)
    assert clock.periods_per_year == clock.measured == per_year and clock.set_by == "the data"
    # ... within half a percent of the bars a year the file itself holds
    counted = (len(stamps) - 1) / ((stamps[-1] - stamps[0]) / YEAR)
    assert clock.periods_per_year == pytest.approx(counted, rel=0.005)
    # naive stamps in the exchange's own time (no DST jump in them) read the same
    local = detect_clock(pd.DatetimeIndex(stamps.tz_localize(None)))
    assert (local.interval, local.hours, local.periods_per_year) == (interval, hours, per_year)


def test_stamps_whose_offset_changes_with_dst_are_read_on_one_clock(tmp_path):
    """The file's stamps say -05:00 in winter and -04:00 in summer: read in UTC, the 09:35 bar moves an hour."""
    write_bars(tmp_path / "stock.csv", stock_stamps())
    dates = load_bars(str(tmp_path / "stock.csv"))["stock"]["date"]
    first = dates.groupby(dates.dt.date).min().dt.strftime("%H:%M")
    assert first[pd.Timestamp("2017-03-10").date()] == "14:35" and first[pd.Timestamp("2017-03-13").date()] == "13:35"
    # the same bars as pandas keeps them: a zoned, unnamed DatetimeIndex in parquet
    frame = pd.read_csv(tmp_path / "stock.csv").drop(columns="Date")
    frame.index = stock_stamps()
    frame.to_parquet(tmp_path / "indexed.parquet")
    assert load_bars(str(tmp_path / "indexed.parquet"))["indexed"]["date"].equals(dates)


def test_daily_and_longer_bars():
    assert detect_clock(build_market_data(DataConfig(source="sp500")).dates).describe() == \
        "bars of 1 day, exchange hours, 1 a day: 252 bars a year, from the data"
    assert build_market_data(DataConfig(source="dow")).clock.periods_per_year == 252
    every_day = detect_clock(pd.date_range("2020-01-01", periods=800, freq="D"))  # crypto's daily bars
    assert (every_day.hours, every_day.periods_per_year) == ("24/7", 365)
    weekdays = detect_clock(pd.DatetimeIndex(make_bars(800)["Date"]))  # FX or stocks: 252 (set 260 for FX)
    assert (weekdays.hours, weekdays.periods_per_year) == ("exchange", 252)
    weekly = detect_clock(pd.date_range("2000-01-07", periods=300, freq="W-FRI"))
    assert weekly.periods_per_year == pytest.approx(365.25 / 7)


@pytest.mark.parametrize("source", ["sp500", "dow"])
def test_the_embedded_daily_data_is_annualised_at_252_as_before(source):
    """Daily stocks keep 252 bars a year, read from the dates as the number was set before: the realised-vol
    feature of every underlying and the report's figures of holding the first are pandas' with √252 and 252."""
    data = build_market_data(DataConfig(source=source))
    assert (data.clock.interval, data.clock.periods_per_year, data.clock.set_by) == (pd.Timedelta(days=1), 252,
                                                                                      "the data")
    vol = data.feature_names.index("realized_vol")
    for s in range(len(data.symbols)):
        by_hand = np.log(pd.Series(data.bars["close"][s])).diff().rolling(20).std() * math.sqrt(252)
        np.testing.assert_allclose(data.raw_features[s, 21:, vol], by_hand.to_numpy()[21:], rtol=1e-9)
    close = data.bars["close"][0]
    r = pd.Series(close).pct_change().dropna()
    got = curve_metrics(close, pd.DatetimeIndex(data.dates), np.zeros(len(close)), data.clock)
    assert got["bars"] == len(r)
    assert got["annual_vol"] == pytest.approx(r.std() * math.sqrt(252), rel=1e-9)
    assert got["sharpe"] == pytest.approx(r.mean() / r.std() * math.sqrt(252), rel=1e-9)
    assert got["annual_return"] == pytest.approx((close[-1] / close[0]) ** (252 / len(r)) - 1, rel=1e-9)


@pytest.mark.parametrize("name", MARKETS)
def test_annualised_vol_return_and_sharpe_equal_pandas_from_the_timestamps(tmp_path, name):
    """The realised-vol feature and the report's annual return, vol and Sharpe of holding the underlying, against
    the same figures computed by hand with the bars a year counted from the file's timestamps."""
    frame = write_bars(tmp_path / "bars.csv", MARKETS[name][0]())
    data = build_market_data(DataConfig(source=str(tmp_path / "bars.csv")))
    stamps = pd.to_datetime(frame["Date"], utc=True)
    years = (stamps.iloc[-1] - stamps.iloc[0]) / YEAR
    per_year = (len(frame) - 1) / years
    close = frame["Close"]
    by_hand = np.log(close).diff().rolling(20).std() * math.sqrt(per_year)
    first = len(frame) - len(data.dates)  # the warm-up rows the pipeline dropped
    np.testing.assert_allclose(data.raw_features[0, :, data.feature_names.index("realized_vol")],
                               by_hand.to_numpy()[first:], rtol=0.01)
    r = close.pct_change().dropna()
    got = curve_metrics(close.to_numpy(), pd.DatetimeIndex(stamps.dt.tz_localize(None)), np.zeros(len(frame)),
                        data.clock)
    assert got["bars"] == len(r)
    assert got["annual_return"] == pytest.approx((close.iloc[-1] / close.iloc[0]) ** (1 / years) - 1, rel=0.01)
    assert got["annual_vol"] == pytest.approx(r.std() * math.sqrt(per_year), rel=0.01)
    assert got["sharpe"] == pytest.approx(r.mean() / r.std() * math.sqrt(per_year), rel=0.01)
    assert 0.08 < got["annual_vol"] < 0.16  # the walk's 12% a year, not an hourly figure annualised as a day's


@pytest.mark.parametrize("name", MARKETS)
def test_the_data_command_reports_the_training_splits_vol_as_pandas_does(tmp_path, capsys, name):
    """`python -m clstm_ppo.data` on the file: the training split's mean realised vol (the figure that read 1.3% a
    year on hourly EURUSD with 252 bars a year) against pandas over the rows between the split's printed stamps."""
    frame = write_bars(tmp_path / f"{name}.csv", MARKETS[name][0]())
    assert run_cli(data_main, ["--data", str(tmp_path / f"{name}.csv")]) == 0
    lines = capsys.readouterr().out.splitlines()
    split = next(line.split() for line in lines if line.startswith("train "))
    first, last = pd.Timestamp(" ".join(split[2:4])), pd.Timestamp(" ".join(split[4:6]))
    printed = float(next(line.split()[1] for line in lines if line.startswith("realized_vol ")))
    stamps = pd.to_datetime(frame["Date"], utc=True).dt.tz_localize(None)
    per_year = (len(frame) - 1) / ((stamps.iloc[-1] - stamps.iloc[0]) / YEAR)
    vol = np.log(frame["Close"]).diff().rolling(20).std() * math.sqrt(per_year)
    rows = (stamps >= first) & (stamps <= last)
    assert rows.sum() == int(split[1])
    assert printed == pytest.approx(vol[rows].mean(), rel=0.01)
    assert 0.08 < printed < 0.16  # the walk's 12% a year


def test_a_folder_mixing_intervals_is_one_line_and_exit_2(tmp_path, capsys):
    folder = tmp_path / "bars"
    folder.mkdir()
    write_bars(folder / "EURUSD.csv", fx_stamps())
    make_bars(400).to_csv(folder / "SPX.csv", index=False)
    assert run_cli(data_main, ["--data", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: data source '{folder}' mixes bar intervals: EURUSD has bars of 1 h, SPX of 1 day; give "
                   "underlyings of one interval (resample the finer bars, or train on each interval apart)\n")


def test_a_number_overrides_the_data_and_one_far_from_it_is_a_warning(tmp_path, capsys):
    write_bars(tmp_path / "EURUSD.csv", fx_stamps())
    source = str(tmp_path / "EURUSD.csv")
    with pytest.warns(UserWarning, match=r"data.periods_per_year 252 is far from the 6,240 bars a year of .*EURUSD"
                                         r".csv \(bars of 1 h, 24/5, 24 a day\); set data.periods_per_year=auto"):
        daily = build_market_data(DataConfig(source=source, periods_per_year=252))
    auto = build_market_data(DataConfig(source=source))
    assert daily.clock.set_by == "data.periods_per_year" and daily.periods_per_year == 252
    vol = auto.feature_names.index("realized_vol")
    np.testing.assert_allclose(daily.raw_features[..., vol] * math.sqrt(6240 / 252), auto.raw_features[..., vol],
                               rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 6,000 is near the data's own 6,240: no warning
        assert build_market_data(DataConfig(source=source, periods_per_year=6000)).periods_per_year == 6000
    assert run_cli(data_main, ["--data", source, "--set", "data.periods_per_year=6000"]) == 0
    assert "bars of 1 h, 24/5, 24 a day: 6,000 bars a year, from data.periods_per_year (the data's own: 6,240)" \
        in capsys.readouterr().out


def test_auto_is_the_default_and_a_checkpoint_that_saved_252_keeps_it(capsys):
    assert Config().data.periods_per_year == "auto"
    saved = to_dict(Config())
    saved["data"]["periods_per_year"] = 252  # what every run saved before the setting read the data
    assert load_config(None, [], base=saved).data.periods_per_year == 252
    assert load_config(None, ["data.periods_per_year=auto"], base=saved).data.periods_per_year == "auto"
    assert run_cli(data_main, ["--data", "synthetic", "--set", "data.periods_per_year=daily"]) == 2
    assert capsys.readouterr().err == ("error: config: data.periods_per_year is 'daily'; choose one of auto, or a "
                                       "number in [1, 1e9]\n")


def test_an_intraday_open_at_the_last_close_is_stale_only_after_the_market_was_shut(tmp_path):
    """Every bar of the file opens at the previous close: inside a session that is the price; after the night
    (or a hole of more than 1.5 bars) it is a stale print, as every daily bar's is."""
    stamps = stock_stamps()
    write_bars(tmp_path / "stock.csv", stamps)
    data = build_market_data(DataConfig(source=str(tmp_path / "stock.csv")))
    gaps = pd.Series(data.dates).diff()
    np.testing.assert_array_equal(market_stale_opens(data)[0], (gaps > pd.Timedelta(minutes=7.5)).to_numpy())
    assert 250 < market_stale_opens(data)[0].sum() < 400  # a session's first bar, and the bars after a hole
    sp500 = build_market_data(DataConfig(source="sp500"))
    open_, close = sp500.bars["open"][0], sp500.bars["close"][0]
    by_hand = np.concatenate([[False], np.abs(open_[1:] / close[:-1] - 1) <= 1e-6])
    np.testing.assert_array_equal(market_stale_opens(sp500)[0], by_hand)  # daily bars: as before


def test_the_data_command_names_the_interval_hours_and_bars_a_year(tmp_path, capsys):
    write_bars(tmp_path / "BTC.csv", crypto_stamps())
    assert run_cli(data_main, ["--data", str(tmp_path / "BTC.csv")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "bars of 15 min, 24/7, 95 a day: 34,675 bars a year, from the data"


@pytest.mark.parametrize(("interval", "hours", "step", "per_year"), [
    ("1D", "exchange", pd.Timedelta(days=1), 252), ("1D", "24/7", pd.Timedelta(days=1), 365),
    ("15min", "24/7", pd.Timedelta(minutes=15), 96 * 365), ("1h", "24/5", pd.Timedelta(hours=1), 24 * 260),
    ("5min", "exchange", pd.Timedelta(minutes=5), 78 * 252),
])
def test_the_synthetic_market_keeps_any_clock_and_its_vol_is_annual(interval, hours, step, per_year):
    cfg = SyntheticConfig(n_bars=4000, interval=interval, hours=hours, regime_vol=[0.2], regime_drift=[0.0],
                          jumps_per_year=0.0)
    dates = synthetic_dates(cfg)
    assert len(dates) == 4000 and dates.is_monotonic_increasing and dates.is_unique
    data = build_market_data(DataConfig(source="synthetic", synthetic=cfg, turbulence_lookback=60))
    assert (data.clock.interval, data.clock.hours, data.periods_per_year) == (step, hours, per_year)
    vol = data.raw_features[0, :, data.feature_names.index("realized_vol")]
    assert np.median(vol) == pytest.approx(0.2, rel=0.05)  # the regime's 20% a year, at any interval
    if cfg.hours == "exchange" and step < pd.Timedelta(days=1):
        times = pd.Series(dates.time)
        assert (times.min(), times.max()) == (pd.Timestamp("09:35").time(), pd.Timestamp("16:00").time())


def test_a_synthetic_interval_it_cannot_keep_is_one_line(capsys):
    assert run_cli(data_main, ["--data", "synthetic", "--set", "data.synthetic.interval=2D"]) == 2
    assert capsys.readouterr().err.startswith("error: config: data.synthetic.interval '2D' is not a bar interval")


def test_a_daily_synthetic_interval_reads_under_pandas_3_0(monkeypatch):
    """pandas 3.0's Timedelta refused its own calendar Day offset (3.1 takes it again): the smoke config's daily bars
    must not depend on which (a GPU image with 3.0 failed there)."""
    from clstm_ppo.data import synthetic

    real = pd.Timedelta

    def pandas_3_0_timedelta(*args, **kwargs):
        if args and isinstance(args[0], pd.offsets.Day):
            raise ValueError("Value must be Timedelta, string, integer, float, timedelta or convertible, not Day")
        return real(*args, **kwargs)

    monkeypatch.setattr(synthetic.pd, "Timedelta", pandas_3_0_timedelta)
    for interval, step in (("1D", pd.Timedelta(days=1)), ("D", pd.Timedelta(days=1)), ("1h", pd.Timedelta(hours=1))):
        assert synthetic._interval(SyntheticConfig(interval=interval)) == step
