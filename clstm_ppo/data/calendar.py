"""How a source's bars keep time: their interval, the hours the market trades, and from both the
bars in a year, the one number that annualises every volatility, return and Sharpe ratio
(docs/DATA.md, "Bar interval and hours").

Everything is read from the timestamps: the interval is their median spacing; a market whose
Saturdays and Sundays both hold bars trades 24/7; otherwise one whose sessions (runs of bars without
a pause of SESSION_BREAK) last ROUND_THE_CLOCK or more trades 24/5 (FX, futures), and the rest keep
exchange hours. Daily bars of weekdays count as an exchange's days.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from clstm_ppo.data.errors import DataError

HOURS = {"24/7": "24/7", "24/5": "24/5", "exchange": "exchange hours"}
# Trading days a year: every day, every weekday, an exchange's weekdays less its holidays
# (the convention that annualises daily stock returns with 252; a daily FX file that wants
# 260 sets data.periods_per_year).
DAYS_PER_YEAR = {"24/7": 365.0, "24/5": 260.0, "exchange": 252.0}
# a median spacing this long is a daily bar (a day's stamp need not be midnight)
DAILY = pd.Timedelta(hours=20)
# ... and this long, a bar of several days (weekly, monthly)
LONGER_THAN_DAILY = pd.Timedelta(days=1.5)
YEAR = pd.Timedelta(days=365.25)  # bars longer than a day are counted over the calendar
# a market trades every day when its Saturdays and its Sundays each hold this share of bars
WEEKEND_SHARE = 0.05
ROUND_THE_CLOCK = pd.Timedelta(hours=20)  # a session this long trades around the clock
# a pause this long ends a session: an overnight, not a lunch break
SESSION_BREAK = pd.Timedelta(hours=4)
# a gap of more than this many intervals is a pause: the next bar opens after the market was shut
PAUSE = 1.5
FAR = 0.1  # a data.periods_per_year further than this share from the data's own is worth a warning


@dataclass(frozen=True)
class BarClock:
    """The bars' interval and market hours, and the bars a year every annualised figure uses."""

    interval: pd.Timedelta  # the median spacing of the timestamps
    hours: str  # a key of HOURS
    bars_per_day: float  # bars in a trading day: an exchange's session, else a calendar day
    periods_per_year: float  # what annualises: the data's own (measured), or data.periods_per_year
    measured: float  # bars a year as the timestamps give them
    set_by: str = "the data"  # or "data.periods_per_year"

    @property
    def daily(self) -> bool:
        return self.interval >= DAILY

    def bars(self) -> str:
        """``bars of 15 min, 24/7, 96 a day``."""
        return (
            f"bars of {interval_name(self.interval)}, {HOURS[self.hours]}, "
            f"{self.bars_per_day:.4g} a day"
        )

    def describe(self) -> str:
        """One line for the data command and the backtest report, e.g.
        ``bars of 15 min, 24/7, 96 a day: 35,040 bars a year, from the data``."""
        used = f"{self.periods_per_year:,.6g} bars a year, from {self.set_by}"
        if self.set_by != "the data":
            used += f" (the data's own: {self.measured:,.6g})"
        return f"{self.bars()}: {used}"

    def label(self, stamp: pd.Timestamp) -> str:
        """A bar as reports write it: its date (daily bars) or its timestamp (intraday bars)."""
        return stamp.date().isoformat() if self.daily else stamp.isoformat(sep=" ")

    def as_dict(self) -> dict[str, float | str]:
        return {
            "interval": interval_name(self.interval),
            "interval_seconds": self.interval.total_seconds(),
            "hours": self.hours,
            "bars_per_day": self.bars_per_day,
            "periods_per_year": self.periods_per_year,
            "measured_periods_per_year": self.measured,
            "set_by": self.set_by,
        }

    def after_pause(self, dates: pd.DatetimeIndex) -> np.ndarray:
        """(T,) bool: bar t opens after the market was shut (the first bar too). Every daily bar of
        a market that closes at night does; an intraday bar does after a gap of more than PAUSE
        intervals (the overnight, the weekend, a lunch break, missing bars), not inside continuous
        trading, where it opens at the last price."""
        if self.daily and self.hours != "24/7":
            return np.ones(len(dates), dtype=bool)
        gaps = np.diff(dates.values) > PAUSE * self.interval.to_timedelta64()
        return np.concatenate([[True], gaps])


def interval_name(interval: pd.Timedelta) -> str:
    """``1 day``, ``7 days``, ``1 h``, ``15 min``, ``30 s``."""
    for unit, name in (
        (pd.Timedelta(days=1), "day"),
        (pd.Timedelta(hours=1), "h"),
        (pd.Timedelta(minutes=1), "min"),
    ):
        if interval >= unit and interval % unit == pd.Timedelta(0):
            count = interval // unit
            return f"{count} {name}{'s' if name == 'day' and count > 1 else ''}"
    return f"{interval.total_seconds():g} s"


def bar_interval(dates: pd.DatetimeIndex) -> pd.Timedelta:
    """The median spacing of sorted timestamps (at least two): gaps (nights, weekends,
    holidays) do not move it."""
    return pd.Timedelta(np.median(np.diff(dates.values)))


def _trades_weekends(dates: pd.DatetimeIndex) -> bool:
    share = np.bincount(dates.day_of_week.to_numpy(), minlength=7) / len(dates)
    return bool(share[5] >= WEEKEND_SHARE and share[6] >= WEEKEND_SHARE)


def _session_bars(dates: pd.DatetimeIndex) -> np.ndarray:
    """Bars in each session: the runs of bars that no pause of SESSION_BREAK interrupts."""
    starts = np.concatenate([[True], np.diff(dates.values) >= SESSION_BREAK.to_timedelta64()])
    return np.bincount(np.cumsum(starts) - 1)


def market_hours(dates: pd.DatetimeIndex, interval: pd.Timedelta) -> str:
    """A key of HOURS, from which days of the week hold bars and how long a session lasts."""
    if _trades_weekends(dates):
        return "24/7"
    if interval >= DAILY:
        return "exchange"  # a daily bar cannot show its hours: weekdays count as an exchange's days
    return "24/5" if np.median(_session_bars(dates)) * interval >= ROUND_THE_CLOCK else "exchange"


def bars_per_day(dates: pd.DatetimeIndex, interval: pd.Timedelta, hours: str) -> float:
    """The median bars of an exchange's session, or of a calendar day of a market trading round the
    clock (the short first and last days of a week or of the file do not move a median)."""
    if interval >= DAILY:
        return float(min(1.0, pd.Timedelta(days=1) / interval))
    if hours == "exchange":
        return float(np.median(_session_bars(dates)))
    return float(np.median(pd.Series(dates.normalize()).value_counts().to_numpy()))


def detect_clock(dates: pd.DatetimeIndex) -> BarClock:
    """The clock of sorted, unique timestamps (at least two)."""
    interval = bar_interval(dates)
    hours = market_hours(dates, interval)
    per_day = bars_per_day(dates, interval, hours)
    if interval >= LONGER_THAN_DAILY:
        # weekly or monthly bars: as many a year as the calendar holds
        per_year = YEAR / ((dates[-1] - dates[0]) / (len(dates) - 1))
    else:
        per_year = per_day * DAYS_PER_YEAR[hours]
    return BarClock(interval, hours, per_day, float(per_year), float(per_year))


def check_one_interval(frames: dict[str, pd.DataFrame], source: str) -> None:
    """A one-line DataError where the underlyings' bars have different intervals: joined
    by date they would keep only the coarser bars' stamps, and no one number of bars a
    year would fit them."""
    intervals = [
        (s, bar_interval(pd.DatetimeIndex(f["date"]))) for s, f in frames.items() if len(f) > 1
    ]
    if len({interval for _, interval in intervals}) > 1:
        (a, ia), (b, ib) = (
            intervals[0],
            next(pair for pair in intervals if pair[1] != intervals[0][1]),
        )
        raise DataError(
            f"data source '{source}' mixes bar intervals: {a} has bars of {interval_name(ia)}, {b} "
            f"of {interval_name(ib)}; give underlyings of one interval (resample the finer bars, "
            "or train on each interval apart)"
        )


def market_clock(dates: pd.DatetimeIndex, setting: float | str, source: str) -> BarClock:
    """The data's clock, its bars a year replaced by ``data.periods_per_year`` where that is a
    number (a checkpoint saved before the setting read the data keeps its 252 so); a number far from
    the data's own is warned about."""
    clock = detect_clock(dates)
    if setting == "auto":
        return clock
    if abs(float(setting) / clock.measured - 1.0) > FAR:
        warnings.warn(
            f"data.periods_per_year {float(setting):,.6g} is far from the {clock.measured:,.6g} "
            f"bars a year of {source} ({clock.bars()}); set data.periods_per_year=auto to "
            "annualise by the data",
            stacklevel=3,
        )
    return replace(clock, periods_per_year=float(setting), set_by="data.periods_per_year")
