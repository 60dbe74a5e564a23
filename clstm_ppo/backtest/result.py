"""What one policy's continuous walk over a split leaves behind: the input of every report."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from clstm_ppo.data.calendar import BarClock


@dataclass
class WalkResult:
    """One policy walked once over a split, one copy per underlying, from the split's
    first bar to its last.

    ``equity[s, i]`` is underlying s's account value at the close of ``dates[i]``;
    ``equity[:, 0]`` is the initial cash (nothing has traded at the first bar's close: its
    decision fills at the next bar).
    """

    policy: str
    symbols: list[str]  # (S,)
    dates: pd.DatetimeIndex  # (n + 1,) every bar of the split, in order
    equity: np.ndarray  # (S, n + 1) dollars
    rate: np.ndarray  # (S, n + 1) risk-free rate of each bar's day, annual, continuously compounded
    closed: np.ndarray  # (S,) trades closed (sold or expired)
    wins: np.ndarray  # (S,) closed trades with positive P&L net of every cost
    open_at_end: np.ndarray  # (S,) positions still open at the last bar (marked to market)
    traded: np.ndarray  # (S,) dollars of premium bought and sold (notional of every fill)
    costs: np.ndarray  # (S, K) dollars paid per cost kind (clstm_ppo.market.COST_KINDS)
    # the walk's env.ruin_fraction: the level reports call ruin (the walk itself never stops)
    ruin_fraction: float
    # the data's bars: their interval, and the bars a year that annualise every figure of the walk
    clock: BarClock
    # (S,) closed options' own P&L, every cost in; None: not recorded
    option_pnl: np.ndarray | None = None
    # (S,) bars whose chosen action the mask turned into hold; None: not recorded
    masked: np.ndarray | None = None

    @property
    def daily_returns(self) -> np.ndarray:
        """(S, n) simple returns from each bar's close to the next (a day's on daily bars)."""
        return self.equity[:, 1:] / self.equity[:, :-1] - 1.0
