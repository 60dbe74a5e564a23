"""Stale opens: bars whose open is the previous close although the market was shut in between, a
print no order could have traded at.

In the embedded S&P 500 the open equals the previous close on 95-98% of the bars of 1999-2005, so a
"fill at the next open" there would fill at the price the agent just saw, without the overnight gap
a real fill faces. The market fills orders for such bars at their close instead (docs/MARKET.md).
Inside continuous trading (intraday bars without a pause, every bar of a 24/7 market) a bar opens
where the last one closed: that is the price, not a stale print (docs/DATA.md, "Stale opens").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from clstm_ppo.data.dataset import MarketData

STALE_TOLERANCE = 1e-6  # an open within this relative distance of the previous close is stale


def stale_opens(
    open_: np.ndarray, close: np.ndarray, after_pause: np.ndarray | None = None
) -> np.ndarray:
    """(S, T) bool: bar t opens at bar t-1's close (to STALE_TOLERANCE) after the market was shut
    (``after_pause``, (T,) bool: ``BarClock.after_pause``; None: every bar, as daily bars are); the
    first bar never is."""
    stale = np.zeros(open_.shape, dtype=bool)
    stale[:, 1:] = np.abs(open_[:, 1:] / close[:, :-1] - 1.0) <= STALE_TOLERANCE
    return stale if after_pause is None else stale & after_pause


def market_stale_opens(data: MarketData) -> np.ndarray:
    """(S, T) bool: the stale opens of ``data``, judged by its clock."""
    return stale_opens(data.bars["open"], data.bars["close"], data.clock.after_pause(data.dates))
