"""Hand-made markets for env tests: known prices, so expected cash flows can be computed by hand."""
import numpy as np
import pandas as pd

from clstm_ppo.data import FEATURE_NAMES, MarketData, Normalizer
from clstm_ppo.data.calendar import BarClock

# A daily exchange's clock: every bar opens after the market was shut (so an open at the last close is stale)
EXCHANGE_DAYS = BarClock(pd.Timedelta(days=1), "exchange", 1.0, 252.0, 252.0)


def handmade_market(close: np.ndarray, window: int = 3, turbulence: np.ndarray | None = None,
                    threshold: float = 1.0, iv: float = 0.2) -> MarketData:
    """One underlying whose bars open at the previous close, one calendar day apart, all in the train split."""
    close = np.asarray(close, dtype=np.float64)
    n = len(close)
    open_ = np.concatenate([[close[0]], close[:-1]])
    f = len(FEATURE_NAMES)
    features = np.random.default_rng(0).normal(size=(1, n, f)).astype(np.float32)
    return MarketData(
        symbols=["HAND"], dates=pd.date_range("2020-01-01", periods=n, freq="D"), feature_names=FEATURE_NAMES,
        features=features, raw_features=features.astype(np.float64),
        bars={"open": open_[None], "high": np.maximum(open_, close)[None], "low": np.minimum(open_, close)[None],
              "close": close[None], "volume": np.full((1, n), 1e9), "iv": np.full((1, n), iv),
              "realized_vol": np.full((1, n), iv)},
        turbulence=np.zeros(n) if turbulence is None else np.asarray(turbulence, dtype=np.float64),
        turbulence_threshold=threshold, splits={"train": (0, n), "validation": (0, n), "test": (0, n)},
        normalizer=Normalizer(FEATURE_NAMES, np.zeros(f), np.ones(f)), window=window, clock=EXCHANGE_DAYS,
    )


def recording(policy, state, seen: list, field: str = "row"):
    """``policy`` (with its carried ``state``) wrapped so every decision's observed ``field`` (row, portfolio,
    ...) and chosen action are appended to ``seen``."""
    def act(obs, inner):
        action, inner = policy(obs, inner)
        seen.append((getattr(obs, field).clone(), action.clone()))
        return action, inner
    return act, state
