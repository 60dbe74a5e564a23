"""Load OHLCV bars from CSV/parquet files or a built-in source, and check them.

Every problem becomes a :class:`DataError` naming the file, the column or row,
and the fix; pandas' own exceptions never reach the user.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from clstm_ppo.config import PlantedConfig, SyntheticConfig, first_line
from clstm_ppo.data.errors import DataError
from clstm_ppo.data.planted import generate_planted
from clstm_ppo.data.synthetic import generate_synthetic

PRICE_COLUMNS = ("open", "high", "low", "close")
# Spellings accepted for each column, compared after lower-casing and dropping spaces, '_' and '-'.
ALIASES = {
    "date": ("date", "datetime", "timestamp", "time", "unnamed:0", ""),
    "open": ("open", "o"),
    "high": ("high", "h"),
    "low": ("low", "l"),
    "close": ("close", "c", "last", "price"),
    "adj_close": ("adjclose", "adjustedclose"),
    "volume": ("volume", "vol", "v"),
    "symbol": ("symbol", "ticker", "underlying"),
    "iv": ("iv", "impliedvol", "impliedvolatility", "vix"),
    "rate": ("rate", "riskfree", "riskfreerate", "rf"),
}
DATA_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq")


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


def _canonical(name: object) -> str:
    return str(name).strip().lower().replace(" ", "").replace("_", "").replace("-", "")


def _rename_columns(frame: pd.DataFrame, label: str) -> pd.DataFrame:
    lookup = {alias: canon for canon, aliases in ALIASES.items() for alias in aliases}
    renamed: dict[object, str] = {}
    for column in frame.columns:
        canon = lookup.get(_canonical(column))
        if canon is None:
            continue
        if canon in renamed.values():
            raise DataError(
                f"{label}: two columns both mean '{canon}' (one is {column!r}); keep one of them"
            )
        renamed[column] = canon
    return frame.rename(columns=renamed)[list(renamed.values())]


def _read_table(path: Path) -> pd.DataFrame:
    try:
        if path.name.endswith((".parquet", ".pq")):
            frame = pd.read_parquet(path)
            if isinstance(frame.index, pd.DatetimeIndex) or frame.index.name:
                # a parquet file often keeps its dates as the index, often
                # unnamed (pandas' own to_parquet)
                frame = frame.rename_axis(frame.index.name or "date").reset_index()
            return frame
        return pd.read_csv(path)
    except (
        pd.errors.ParserError,
        pd.errors.EmptyDataError,
        UnicodeDecodeError,
        OSError,
        ValueError,
    ) as err:
        raise DataError(
            f"{path}: cannot be read as {'parquet' if 'parquet' in path.name else 'CSV'} "
            f"({first_line(err)}); "
            "check that it is a table of OHLCV bars"
        ) from None


def _row_label(frame: pd.DataFrame, position: int) -> str:
    """A 1-based data row with its date when the date is known, for error messages."""
    if "date" in frame.columns and pd.api.types.is_datetime64_any_dtype(frame["date"]):
        return f"row {position + 1} ({frame['date'].iloc[position].date()})"
    return f"row {position + 1}"


def _to_datetime(raw: pd.Series) -> pd.Series:
    text = raw.dtype == object or pd.api.types.is_string_dtype(raw)
    try:
        return (
            pd.to_datetime(raw, errors="coerce", format="mixed")
            if text
            else pd.to_datetime(raw, errors="coerce")
        )
    except ValueError:
        # stamps of several UTC offsets (a zone's DST change) or of several zones: read them in UTC
        return pd.to_datetime(raw, errors="coerce", format="mixed" if text else None, utc=True)


def _parse_dates(frame: pd.DataFrame, label: str) -> pd.DataFrame:
    raw = frame["date"]
    if pd.api.types.is_numeric_dtype(raw) and not pd.api.types.is_bool_dtype(raw):
        # pandas reads a bare number as nanoseconds since 1970: 17532 (days)
        # would become bars 1e-09 s apart
        raise DataError(
            f"{label}: column 'date' holds numbers ({raw.iloc[0]!r} in row 1), not dates; convert "
            "them first, e.g. pd.to_datetime(frame['date'], unit='D') for days since 1970-01-01 "
            "(unit='s' for seconds, format='%Y%m%d' for 20130131), or write dates as YYYY-MM-DD"
        )
    dates = _to_datetime(raw)
    bad = np.flatnonzero(dates.isna().to_numpy())
    if bad.size:
        raise DataError(
            f"{label}: column 'date' row {bad[0] + 1} holds {raw.iloc[bad[0]]!r}, not a date; "
            "write dates as YYYY-MM-DD (or a timestamp)"
        )
    if dates.dt.tz is not None:
        dates = dates.dt.tz_convert("UTC").dt.tz_localize(None)  # one clock for every file
    frame = frame.copy()
    frame["date"] = dates
    return frame


def _check_bars(frame: pd.DataFrame, label: str) -> pd.DataFrame:
    """Numeric, finite, positive, sorted, unique: or a one-line error saying where
    and how to fix it."""
    frame = frame.reset_index(drop=True)
    numeric = [
        c for c in (*PRICE_COLUMNS, "adj_close", "volume", "iv", "rate") if c in frame.columns
    ]
    for column in numeric:
        values = pd.to_numeric(frame[column], errors="coerce").astype(float)
        bad = np.flatnonzero(~np.isfinite(values.to_numpy()))
        if bad.size:
            shown = frame[column].iloc[bad[0]]
            shown = "empty or NaN" if pd.isna(shown) else repr(shown)
            raise DataError(
                f"{label}: column '{column}' {_row_label(frame, bad[0])} is {shown}, not a finite "
                "number; fill or drop that row"
            )
        frame[column] = values
    for column in (*PRICE_COLUMNS, "adj_close", "iv"):
        if column in frame.columns:
            bad = np.flatnonzero(frame[column].to_numpy() <= 0)
            if bad.size:
                where = _row_label(frame, bad[0])
                raise DataError(
                    f"{label}: column '{column}' {where} is {frame[column].iloc[bad[0]]}; "
                    "prices must be positive: fix or drop that row"
                )
    if "rate" in frame.columns:
        bad = np.flatnonzero(np.abs(frame["rate"].to_numpy()) > 0.5)
        if bad.size:
            raise DataError(
                f"{label}: column 'rate' {_row_label(frame, bad[0])} is "
                f"{frame['rate'].iloc[bad[0]]}; give the risk-free rate as an annual decimal (0.05 "
                "for 5%), not in percent"
            )
    crossed = np.flatnonzero(frame["high"].to_numpy() < frame["low"].to_numpy())
    if crossed.size:
        i = crossed[0]
        raise DataError(
            f"{label}: {_row_label(frame, i)} has high {frame['high'].iloc[i]} below low "
            f"{frame['low'].iloc[i]}; fix that row (are the high and low columns "
            "swapped?) or drop it"
        )
    if "volume" in frame.columns:
        bad = np.flatnonzero(frame["volume"].to_numpy() < 0)
        if bad.size:
            raise DataError(
                f"{label}: column 'volume' {_row_label(frame, bad[0])} is negative; "
                "fix or drop that row"
            )
        _warn_zero_volume(frame, label)
    dates = frame["date"].to_numpy()
    steps = np.diff(dates).astype(np.int64)
    backward = np.flatnonzero(steps < 0)
    if backward.size:
        i = backward[0] + 1
        raise DataError(
            f"{label}: dates are not sorted: {_row_label(frame, i)} comes after "
            f"{frame['date'].iloc[i - 1].date()}; sort the file by date"
        )
    repeated = np.flatnonzero(steps == 0)
    if repeated.size:
        i = repeated[0] + 1
        raise DataError(
            f"{label}: date {frame['date'].iloc[i]} appears twice (rows {i} and {i + 1}); "
            "remove the duplicate row"
        )
    return frame


# consecutive bars of no volume (two weeks of days) that are more likely missing data than calm
ZERO_VOLUME_RUN = 10


def _warn_zero_volume(frame: pd.DataFrame, label: str) -> None:
    """One warning for the longest run of zero-volume bars, when it reaches ZERO_VOLUME_RUN: the
    volume features and the option fill limits read it as a market where nothing traded."""
    zero = np.concatenate([[0], (frame["volume"].to_numpy() == 0).astype(np.int8), [0]])
    edges = np.flatnonzero(np.diff(zero))
    starts, ends = edges[::2], edges[1::2]
    if not starts.size or (ends - starts).max() < ZERO_VOLUME_RUN:
        return
    longest = int(np.argmax(ends - starts))
    first, count = int(starts[longest]), int(ends[longest] - starts[longest])
    warnings.warn(
        f"{label}: {count} bars in a row from {_row_label(frame, first)} have zero volume; the "
        "volume features read them as no trading: fill in the volume, or drop the volume column "
        "if the source has none",
        stacklevel=2,
    )


def _adjust_for_splits(frame: pd.DataFrame) -> pd.DataFrame:
    """Scale OHLC by Adj Close / Close so that splits and dividends do not look like crashes.

    Where that changed any price, the frame's ``attrs["dividend_adjusted"]`` is True: the prices
    then include dividends, and options on them are priced with no dividend yield.
    """
    if "adj_close" not in frame.columns:
        frame.attrs["dividend_adjusted"] = False
        return frame
    factor = frame["adj_close"] / frame["close"]
    frame = frame.copy()
    for column in PRICE_COLUMNS:
        frame[column] = frame[column] * factor
    frame = frame.drop(columns="adj_close")
    frame.attrs["dividend_adjusted"] = bool((np.abs(factor.to_numpy() - 1.0) > 1e-9).any())
    return frame


def _frames_from_table(
    frame: pd.DataFrame, label: str, default_symbol: str
) -> dict[str, pd.DataFrame]:
    frame = _rename_columns(frame, label)
    missing = [c for c in ("date", *PRICE_COLUMNS) if c not in frame.columns]
    if missing:
        found = ", ".join(map(str, frame.columns)) or "none"
        raise DataError(
            f"{label}: missing column '{missing[0]}' (found: {found}); "
            "rename or add it (Date, Open, High, Low, Close[, Volume][, Symbol])"
        )
    if frame.empty:
        raise DataError(f"{label}: holds no rows; point --data at a file with bars in it")
    frame = _parse_dates(frame, label)
    if "symbol" not in frame.columns:
        return {default_symbol: _adjust_for_splits(_check_bars(frame, label))}
    out = {}
    for symbol, part in frame.groupby("symbol", sort=True):
        out[str(symbol)] = _adjust_for_splits(
            _check_bars(part.drop(columns="symbol"), f"{label} [symbol {symbol}]")
        )
    return out


def _expand_paths(source: str) -> list[Path]:
    paths: list[Path] = []
    for part in (p.strip() for p in source.split(",") if p.strip()):
        path = Path(part).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.name.endswith(DATA_SUFFIXES))
            if not found:
                raise DataError(
                    f"{path}: folder holds no .csv, .csv.gz or .parquet files; "
                    "put one file per underlying in it"
                )
            paths.extend(found)
        elif path.is_file():
            paths.append(path)
        else:
            names = ", ".join([*BUILTIN_SOURCES, "synthetic", "planted"])
            raise DataError(
                f"data source '{part}' is neither a file nor a folder nor a built-in name; "
                f"pass a CSV/parquet path or one of: {names}"
            )
    return paths


def _symbol_of(path: Path) -> str:
    name = path.name
    for suffix in DATA_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _embedded(filename: str) -> Path:
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


def _carry_forward(
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


def _join_builtin_series(frame: pd.DataFrame, spec: BuiltinSource) -> pd.DataFrame:
    """Join the built-in implied-vol and rate series by date, each carried forward over
    its own holidays."""
    attrs = dict(frame.attrs)
    dates = pd.DatetimeIndex(frame["date"])
    if spec.iv_filename:
        vix = (
            pd.read_csv(_embedded(spec.iv_filename), parse_dates=["Date"])
            .set_index("Date")
            .dropna()
        )
        vix = _carry_forward(vix, dates, spec.iv_filename, spec.carry_past_end)
        # A VIX open outside that day's high-low range is a bad print (five in
        # 1999-2006): use the close before it.
        good_open = (vix["Open"] >= vix["Low"]) & (vix["Open"] <= vix["High"])
        frame = frame.assign(
            iv=vix["Close"].to_numpy() / 100.0,
            iv_open=np.where(good_open, vix["Open"], vix["Close"].shift(1)) / 100.0,
        )
    if spec.rate_filename:
        bills = (
            pd.read_csv(_embedded(spec.rate_filename), parse_dates=["Date"])
            .set_index("Date")
            .dropna()
        )
        bills = _carry_forward(bills, dates, spec.rate_filename, spec.carry_past_end)["rate_pct"]
        frame = frame.assign(rate=tbill_to_continuous(bills.to_numpy()))
    frame = frame.bfill()  # only the first rows, if a series starts after the bars
    frame.attrs = attrs
    return frame


def load_bars(
    source: str,
    symbols: list[str] | None = None,
    synthetic: SyntheticConfig | None = None,
    planted: PlantedConfig | None = None,
) -> dict[str, pd.DataFrame]:
    """Bars per underlying symbol, each a frame with date, open, high, low, close[, volume][, iv[,
    iv_open]][, rate]."""
    if source == "synthetic":
        frames = generate_synthetic(synthetic or SyntheticConfig())
    elif source == "planted":
        frames = generate_planted(planted or PlantedConfig())
    elif source in BUILTIN_SOURCES:
        spec = BUILTIN_SOURCES[source]
        frames = _frames_from_table(
            _read_table(_embedded(spec.filename)), f"built-in '{source}'", spec.symbol
        )
        frames = {s: _join_builtin_series(f, spec) for s, f in frames.items()}
    else:
        frames = {}
        for path in _expand_paths(source):
            for symbol, frame in _frames_from_table(
                _read_table(path), str(path), _symbol_of(path)
            ).items():
                if symbol in frames:
                    raise DataError(
                        f"{path}: underlying '{symbol}' is given twice; keep "
                        "one file per underlying"
                    )
                frames[symbol] = frame
    if symbols:
        unknown = [s for s in symbols if s not in frames]
        if unknown:
            raise DataError(
                f"data source '{source}' has no underlying '{unknown[0]}'; "
                f"it has: {', '.join(frames)}"
            )
        frames = {s: frames[s] for s in symbols}
    return frames
