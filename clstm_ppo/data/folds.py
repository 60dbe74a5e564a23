"""Walk-forward folds (docs/BACKTEST.md): expanding training years, then a validation block, then a
test block, the blocks of later folds each a block later, the last test block ending with the data.

    train 2000..2006 | validate 2007..2009 | test 2010..2012
    train 2000..2009 | validate 2010..2012 | test 2013..2015
    train 2000..2012 | validate 2013..2015 | test 2016..2018      (the embedded S&P 500, 3 folds)

Blocks are whole calendar years: L = usable years // (folds + 3), so the first fold trains on at
least two blocks. Annual folds (``--folds annual``) test one year each: for each test year Y,
train on every year before Y - 1, validate on Y - 1, test on Y, from the first Y with at least
``min_train_years`` training years (3) to the data's last; the embedded S&P 500, whose bars
start in 2000 after warm-up, gives 2004..2018. A partial last year (data ending before
mid-December) joins the last test block. A fold is three end dates (``data.train_end``,
``data.val_end``, ``data.test_end``); every fit of a run on it (normalisation, turbulence
threshold, the IV model's floor and long-run level) reads only its training years, and no bar
after its test block is loaded at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from clstm_ppo.data.errors import DataError


@dataclass(frozen=True)
class Fold:
    index: int  # 0 = the earliest
    train_end: str  # YYYY-MM-DD, inclusive
    val_end: str
    test_end: str

    @property
    def name(self) -> str:
        return f"fold{self.index}"

    def settings(self) -> list[str]:
        """The fold as ``--set`` values for train and evaluate."""
        return [
            f"data.train_end={self.train_end}",
            f"data.val_end={self.val_end}",
            f"data.test_end={self.test_end}",
        ]


def walk_forward_folds(dates: pd.DatetimeIndex, folds: int) -> list[Fold]:
    """``folds`` expanding-window folds over ``dates`` (the bars after indicator
    warm-up), earliest first."""
    if folds < 1:
        raise DataError(f"--folds must be at least 1, got {folds}")
    first_year, last = dates[0].year, dates[-1]
    last_full = last.year if last >= pd.Timestamp(last.year, 12, 15) else last.year - 1
    years = last_full - first_year + 1
    block = years // (folds + 3)
    if block < 1:
        raise DataError(
            f"the data spans {years} whole year(s) after warm-up "
            f"({dates[0].date()}..{last.date()}); {folds} walk-forward fold(s) need at least "
            f"{folds + 3}: ask for fewer folds"
        )
    out = []
    for i in range(folds):
        # this fold's test block ends with this year
        test_year = last_full - (folds - 1 - i) * block
        test_end = str(last.date()) if i == folds - 1 else f"{test_year}-12-31"
        out.append(
            Fold(i, f"{test_year - 2 * block}-12-31", f"{test_year - block}-12-31", test_end)
        )
    return out


ANNUAL = "annual"


def annual_folds(dates: pd.DatetimeIndex, min_train_years: int = 3) -> list[Fold]:
    """One fold a test year over ``dates`` (the bars after indicator warm-up), earliest first: train
    on every year before Y - 1 (at least ``min_train_years`` of them, the first year counting if it
    has bars), validate on Y - 1, test on Y; a partial last year (data ending before mid-December)
    joins the last test year."""
    if min_train_years < 1:
        raise DataError(f"annual folds need at least one training year, got {min_train_years}")
    first_year, last = dates[0].year, dates[-1]
    last_full = last.year if last >= pd.Timestamp(last.year, 12, 15) else last.year - 1
    first_test = first_year + min_train_years + 1
    if first_test > last_full:
        raise DataError(
            f"the data spans {dates[0].date()}..{last.date()}; annual folds need {min_train_years} "
            f"training years, a validation year and a test year ({min_train_years + 2} in all): "
            "ask for fewer folds with --folds N"
        )
    ends = [
        (year, str(last.date()) if year == last_full else f"{year}-12-31")
        for year in range(first_test, last_full + 1)
    ]
    return [
        Fold(i, f"{year - 2}-12-31", f"{year - 1}-12-31", end) for i, (year, end) in enumerate(ends)
    ]


def folds_of(dates: pd.DatetimeIndex, spec: str | int) -> list[Fold]:
    """The folds ``--folds`` names: ``annual`` (one test year each) or a count of
    expanding blocks."""
    if str(spec) == ANNUAL:
        return annual_folds(dates)
    try:
        count = int(spec)
    except ValueError:
        raise DataError(
            f"--folds {spec!r}: give a number of walk-forward folds or 'annual'"
        ) from None
    return walk_forward_folds(dates, count)
