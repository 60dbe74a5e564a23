"""The built-in data sources (the embedded S&P 500 with the VIX and the T-bill, the Dow stocks):
where each file is, its splits and origin, and how its implied-vol and rate series join the bars
by date (docs/DATA.md)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from clstm_ppo.data.errors import DataError


@dataclass(frozen=True)
class BuiltinSource:
    filename: str
    symbol: str  # the underlying's name where the file has no Symbol column
    train_end: str
    val_end: str
    origin: str
    # a VIX-style daily file (Date, Open, High, Low, Close in percent points) joined by date
    iv_filename: str = ""
    # FRED DTB3-style daily file (Date, rate_pct: discount-basis percent) joined by date
    rate_filename: str = ""
    # a broad-based index: its short options margin at index rates (docs/MARKET.md)
    broad_index: bool = False
    # Bars after a joined series' last date take its last value (else they are an error): a declared
    # approximation, never a silent one (README, Data).
    carry_past_end: bool = False


# A joined daily series is carried forward over closed days (a long
# weekend, 9/11's week), no further.
HOLIDAY_GAP_DAYS = 10

BUILTIN_SOURCES = {
    "sp500": BuiltinSource(
        filename="sp500_daily_1999_2018.csv.gz",
        symbol="SPX",
        train_end="2012-12-31",
        val_end="2015-12-31",
        origin="S&P 500 index daily OHLCV 1999-2018, Yahoo-sourced, as shipped in the arch "
        "package's example data",
        iv_filename="vix_daily_1990_2018.csv.gz",  # CBOE VIX (closes = FRED VIXCLS)
        rate_filename="tbill3m_daily_1990_2018.csv.gz",  # FRED DTB3, 3-month T-bill
        broad_index=True,
    ),
    # Single stocks: margin at stock rates (broad_index False) and no VIX, which is the S&P 500's
    # implied vol, not a stock's: market.iv_source auto then takes each stock's vol from the fitted
    # model. Adj Close is dividend-adjusted, so the prices carry the dividends and options on them
    # are priced with no yield. Splits: train 2009-2016 (from 2010 after turbulence's 252-bar
    # warm-up), validation 2017-2018, test 2019-01-02..2020-01-24. The T-bill series ends
    # 2018-12-31, so the test split is priced at its last rate (2.40% discount, 2.44% continuous);
    # the real rate fell to about 1.55% by January 2020, which would make 30-day at-the-money calls
    # up to 1-2% cheaper and puts as much dearer.
    "dow": BuiltinSource(
        filename="dow_stocks_a_2009_2020.csv.gz",
        symbol="DOW",
        train_end="2016-12-31",
        val_end="2018-12-31",
        origin="17 Dow Jones Industrial Average stocks, daily OHLCV 2009-01-26..2020-01-24, "
        "Yahoo-sourced (OHLC split-adjusted, Adj Close also dividend-adjusted)",
        rate_filename="tbill3m_daily_1990_2018.csv.gz",
        carry_past_end=True,
    ),
}


def embedded_file(filename: str) -> Path:
    """Path of a file shipped in clstm_ppo/data/embedded (a real file: the package is
    installed unzipped)."""
    return Path(str(resources.files("clstm_ppo.data") / "embedded" / filename))


def tbill_to_continuous(discount_pct: np.ndarray, days: int = 91) -> np.ndarray:
    """A T-bill's discount-basis yield in percent (FRED DTB3) as a continuously
    compounded annual rate.

    The bill's price is 1 - d * days / 360; holding it to maturity earns ln(1 / price)
    over days / 365 years.
    """
    price = 1.0 - np.asarray(discount_pct, dtype=np.float64) / 100.0 * days / 360.0
    return -np.log(price) * 365.0 / days


def carry_forward(
    table: pd.DataFrame, dates: pd.DatetimeIndex, label: str, past_end: bool
) -> pd.DataFrame:
    """``table`` (dated rows, no NaN) at ``dates``: each date takes the last row on or before
    it, at most HOLIDAY_GAP_DAYS old (any age after the table's last date with ``past_end``);
    dates before its first row stay NaN. A longer gap is an error rather than a stale value
    passed off as that day's."""
    known = pd.Series(table.index, index=table.index)
    used = known.reindex(known.index.union(dates)).ffill().reindex(dates)
    age = (dates - pd.DatetimeIndex(used)).days.to_numpy()
    stale = np.nan_to_num(age, nan=0.0) > HOLIDAY_GAP_DAYS
    if past_end:
        stale &= np.asarray(dates <= table.index[-1])
    if stale.any():
        i = int(np.argmax(stale))
        raise DataError(
            f"{label}: no value within {HOLIDAY_GAP_DAYS} days before {dates[i].date()} "
            f"(the last is from {pd.Timestamp(used.iloc[i]).date()}); fill the gap in that file"
        )
    return table.reindex(table.index.union(dates)).ffill().reindex(dates)


def join_builtin_series(frame: pd.DataFrame, spec: BuiltinSource) -> pd.DataFrame:
    """Join the built-in implied-vol and rate series by date, each carried forward over
    its own holidays."""
    attrs = dict(frame.attrs)
    dates = pd.DatetimeIndex(frame["date"])
    if spec.iv_filename:
        vix = (
            pd.read_csv(embedded_file(spec.iv_filename), parse_dates=["Date"])
            .set_index("Date")
            .dropna()
        )
        vix = carry_forward(vix, dates, spec.iv_filename, spec.carry_past_end)
        # A VIX open outside that day's high-low range is a bad print (five in
        # 1999-2006): use the close before it.
        good_open = (vix["Open"] >= vix["Low"]) & (vix["Open"] <= vix["High"])
        frame = frame.assign(
            iv=vix["Close"].to_numpy() / 100.0,
            iv_open=np.where(good_open, vix["Open"], vix["Close"].shift(1)) / 100.0,
        )
    if spec.rate_filename:
        bills = (
            pd.read_csv(embedded_file(spec.rate_filename), parse_dates=["Date"])
            .set_index("Date")
            .dropna()
        )
        bills = carry_forward(bills, dates, spec.rate_filename, spec.carry_past_end)["rate_pct"]
        frame = frame.assign(rate=tbill_to_continuous(bills.to_numpy()))
    frame = frame.bfill()  # only the first rows, if a series starts after the bars
    frame.attrs = attrs
    return frame
