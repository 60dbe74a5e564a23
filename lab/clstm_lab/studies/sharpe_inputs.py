"""Two strategies' daily returns over the T-bill from two ``evaluate --returns`` files, paired by date, for the
Sharpe-difference test (docs/BACKTEST.md, "Is the difference real?"). Every way the files cannot be paired is
one SharpeInputError line."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

TBILL = "tbill"


class SharpeInputError(ValueError):
    """Returns files that cannot be compared, in one line with the fix."""


@dataclass(frozen=True)
class PairedReturns:
    dates: pd.DatetimeIndex
    a: np.ndarray  # per-bar returns over the T-bill
    b: np.ndarray
    a_name: str
    b_name: str


def _read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise SharpeInputError(f"{path} not found; pass a CSV that evaluate --returns wrote (date, a column a policy)")
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise SharpeInputError(f"{path} is not a readable CSV ({str(err).splitlines()[0]})") from None
    if "date" not in frame.columns:
        raise SharpeInputError(f"{path} has no 'date' column (it has {', '.join(map(str, frame.columns))}); "
                               "write it with evaluate --returns, or name the first column date")
    dates = pd.to_datetime(frame.pop("date"), errors="coerce")
    if dates.isna().any():
        raise SharpeInputError(f"{path}: row {int(np.argmax(dates.isna().to_numpy())) + 2} has no readable date")
    if dates.duplicated().any():
        raise SharpeInputError(f"{path}: the date {dates[dates.duplicated()].iloc[0].date()} appears twice; "
                               "give each day one return")
    return frame.set_index(pd.DatetimeIndex(dates, name="date"))


def _column(frame: pd.DataFrame, path: Path, column: str | None) -> str:
    policies = [c for c in frame.columns if not str(c).startswith(TBILL)]
    if column is None:
        if len(policies) != 1:
            raise SharpeInputError(f"{path} holds {len(policies)} policies ({', '.join(policies)}); choose one "
                                   "with --a-column / --b-column")
        return policies[0]
    if column not in frame.columns:
        raise SharpeInputError(f"{path} has no column {column!r}; it has {', '.join(policies)}")
    return column


def _over_tbill(frame: pd.DataFrame, path: Path, column: str, excess: bool) -> pd.Series:
    returns = frame[column].astype(float)
    if excess:
        return returns
    tbill = f"{TBILL}:{column.split(':', 1)[1]}" if ":" in column else TBILL
    if tbill not in frame.columns:
        raise SharpeInputError(f"{path} has no {tbill!r} column to take the T-bill from; write it with today's "
                               "evaluate --returns, or pass --excess if its returns are already over the T-bill")
    return returns - frame[tbill].astype(float)


def paired_returns(a_path: Path, b_path: Path, a_column: str | None = None, b_column: str | None = None,
                   excess: bool = False) -> PairedReturns:
    """Strategy a's and b's returns over the T-bill on the same days (each file's own T-bill column, unless
    ``excess``: the files' returns are over the T-bill already). The two files must cover the same days."""
    a_frame, b_frame = _read(a_path), _read(b_path)
    a_col, b_col = _column(a_frame, a_path, a_column), _column(b_frame, b_path, b_column)
    a, b = _over_tbill(a_frame, a_path, a_col, excess), _over_tbill(b_frame, b_path, b_col, excess)
    only_a, only_b = a.index.difference(b.index), b.index.difference(a.index)
    if len(only_a) or len(only_b):
        first = min([*only_a[:1], *only_b[:1]])
        raise SharpeInputError(f"the files' dates do not line up: {len(only_a)} day(s) only in {a_path.name}, "
                               f"{len(only_b)} only in {b_path.name} (first {first.date()}); walk both on the same "
                               "split and folds")
    b = b.loc[a.index]
    for name, series, path in ((a_col, a, a_path), (b_col, b, b_path)):
        bad = series.index[~np.isfinite(series.to_numpy())]
        if len(bad):
            raise SharpeInputError(f"{path}: {len(bad)} return(s) of {name} are empty or not finite (first "
                                   f"{bad[0].date()}); drop those days from both files")
    return PairedReturns(a.index, a.to_numpy(), b.to_numpy(), a_col, b_col)
