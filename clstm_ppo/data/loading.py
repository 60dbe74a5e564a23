"""Load OHLCV bars from CSV/parquet files or a built-in source, and check them.

Every problem becomes a :class:`DataError` naming the file, the column or row,
and the fix; pandas' own exceptions never reach the user.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from clstm_ppo.config import PlantedConfig, SyntheticConfig, first_line
from clstm_ppo.data.builtin import BUILTIN_SOURCES, embedded_file, join_builtin_series
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
            _read_table(embedded_file(spec.filename)), f"built-in '{source}'", spec.symbol
        )
        frames = {s: join_builtin_series(f, spec) for s, f in frames.items()}
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
