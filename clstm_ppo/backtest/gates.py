"""Gates on the option market's state: when a conditional rule follows its rule and when it stands
aside (docs/BACKTEST.md, "Conditional rules").

Each gate is an (S, T) bool series read from the implied-vol features the agent observes
(``market.observed.option_feature_values``): at bar t it reads bars up to t only, so a rule gated
by it decides as an agent at t could. Three states and their opposites (the complement, bar for
bar), and ``always``:

- ``iv_above_median``: the implied vol above its own median over the trailing year
  (``data.periods_per_year`` bars, from ZSCORE_MIN_BARS on; before that, never above);
- ``vrp_positive``: the implied vol above the realized vol of the last ``data.vol_window`` bars;
- ``zscore_positive``: the implied vol's trailing-year z-score above 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from clstm_ppo.config import MarketConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.market.observed import OPTION_FEATURE_NAMES, ZSCORE_MIN_BARS, option_feature_values

ALWAYS = "always"
STATES = ("iv_above_median", "vrp_positive", "zscore_positive")
OPPOSITE = {
    "iv_above_median": "iv_at_or_below_median",
    "vrp_positive": "vrp_at_or_below_zero",
    "zscore_positive": "zscore_at_or_below_zero",
}
GATES = (ALWAYS, *STATES, *(OPPOSITE[s] for s in STATES))
WORDS = {
    "iv_above_median": "implied vol is above its trailing-year median",
    "iv_at_or_below_median": "implied vol is at or below its trailing-year median",
    "vrp_positive": "implied vol is above realized vol",
    "vrp_at_or_below_zero": "implied vol is at or below realized vol",
    "zscore_positive": "the implied vol's z-score is above 0",
    "zscore_at_or_below_zero": "the implied vol's z-score is at or below 0",
}


def trailing_median_above(values: np.ndarray, window: int) -> np.ndarray:
    """(S, T) bool: each value above the median of the last ``window`` values up to and including it
    (from ZSCORE_MIN_BARS values on; False before)."""
    frame = pd.DataFrame(values.T)
    median = frame.rolling(window, min_periods=ZSCORE_MIN_BARS).median()
    return (frame > median).to_numpy().T  # NaN medians compare False


def gate_series(data: MarketData, market: MarketConfig) -> dict[str, np.ndarray]:
    """Every gate of GATES as an (S, T) bool series of ``data`` under ``market``'s implied vol."""
    features = option_feature_values(data, market)
    column = lambda name: features[:, :, OPTION_FEATURE_NAMES.index(name)]  # noqa: E731
    window = max(int(data.periods_per_year), ZSCORE_MIN_BARS)
    states = {
        "iv_above_median": trailing_median_above(column("iv"), window),
        "vrp_positive": column("iv_premium") > 0.0,
        "zscore_positive": column("iv_zscore") > 0.0,
    }
    out = {ALWAYS: np.ones(features.shape[:2], dtype=bool)}
    out |= states
    out |= {OPPOSITE[name]: ~series for name, series in states.items()}
    return {name: out[name] for name in GATES}
