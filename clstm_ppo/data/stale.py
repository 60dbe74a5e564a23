"""Stale opens: bars whose open is the previous close, a print no order could have traded at.

In the embedded S&P 500 the open equals the previous close on 95-98% of the bars of 1999-2005, so a
"fill at the next open" there would fill at the price the agent just saw, without the overnight gap a real
fill faces. The market fills orders for such bars at their close instead (docs/MARKET.md).
"""
from __future__ import annotations

import numpy as np

STALE_TOLERANCE = 1e-6  # an open within this relative distance of the previous close is stale


def stale_opens(open_: np.ndarray, close: np.ndarray) -> np.ndarray:
    """(S, T) bool: bar t opens at bar t-1's close (to STALE_TOLERANCE); the first bar never is."""
    stale = np.zeros(open_.shape, dtype=bool)
    stale[:, 1:] = np.abs(open_[:, 1:] / close[:, :-1] - 1.0) <= STALE_TOLERANCE
    return stale
