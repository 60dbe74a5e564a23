"""Walk-forward folds (docs/BACKTEST.md): expanding training years, then a validation block, then a test block,
the blocks of later folds each a block later, the last test block ending with the data.

    train 2000..2006 | validate 2007..2009 | test 2010..2012
    train 2000..2009 | validate 2010..2012 | test 2013..2015
    train 2000..2012 | validate 2013..2015 | test 2016..2018      (the embedded S&P 500, 3 folds)

Blocks are whole calendar years: L = usable years // (folds + 3), so the first fold trains on at least two
blocks. A partial last year (data ending before mid-December) joins the last test block. A fold is three
end dates (``data.train_end``, ``data.val_end``, ``data.test_end``); every fit of a run on it (normalisation,
turbulence threshold, the IV model's floor and long-run level) reads only its training years, and no bar after
its test block is loaded at all.
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
        return [f"data.train_end={self.train_end}", f"data.val_end={self.val_end}", f"data.test_end={self.test_end}"]


def walk_forward_folds(dates: pd.DatetimeIndex, folds: int) -> list[Fold]:
    """``folds`` expanding-window folds over ``dates`` (the bars after indicator warm-up), earliest first."""
    if folds < 1:
        raise DataError(f"--folds must be at least 1, got {folds}")
    first_year, last = dates[0].year, dates[-1]
    last_full = last.year if last >= pd.Timestamp(last.year, 12, 15) else last.year - 1
    years = last_full - first_year + 1
    block = years // (folds + 3)
    if block < 1:
        raise DataError(f"the data spans {years} whole year(s) after warm-up ({dates[0].date()}..{last.date()}); "
                        f"{folds} walk-forward fold(s) need at least {folds + 3}: ask for fewer folds")
    out = []
    for i in range(folds):
        test_year = last_full - (folds - 1 - i) * block  # this fold's test block ends with this year
        test_end = str(last.date()) if i == folds - 1 else f"{test_year}-12-31"
        out.append(Fold(i, f"{test_year - 2 * block}-12-31", f"{test_year - block}-12-31", test_end))
    return out
