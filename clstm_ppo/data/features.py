"""Per-bar features, computed once for the whole series and never per env step.

Every feature at bar t reads only bars up to t (the tests alter later bars and
check). Price-level features are made scale-free (MACD over price, SMA ratios)
so that normalisation fitted on 1999-2012 still fits 2018's price level.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import ta

from clstm_ppo.config import DataConfig

FEATURE_NAMES = (
    "log_return",
    "macd",  # MACD histogram (12/26/9) over close
    "rsi",  # RSI(14)
    "cci",  # CCI(20)
    "adx",  # ADX(14)
    "bollinger_position",  # %B of the (20, 2) Bollinger bands
    "sma_ratio_10",  # close / SMA(10) - 1
    "sma_ratio_30",  # close / SMA(30) - 1
    "realized_vol",  # annualised std of log returns over vol_window bars
    "volume_zscore",  # z-score of log(1 + volume) over volume_window bars; 0 without volume
    "turbulence",  # log(1 + turbulence), the joint market turbulence of every underlying
)


def log_returns(close: pd.Series) -> pd.Series:
    return np.log(close).diff()


def realized_vol(close: pd.Series, window: int, periods_per_year: float) -> pd.Series:
    return log_returns(close).rolling(window).std() * np.sqrt(periods_per_year)


def _volume_zscore(volume: pd.Series | None, index: pd.Index, window: int) -> pd.Series:
    if volume is None:
        return pd.Series(0.0, index=index)
    logv = np.log1p(volume)
    mean, std = logv.rolling(window).mean(), logv.rolling(window).std()
    z = (logv - mean) / std
    # a flat volume says nothing: 0, not a division by zero
    return z.where(std > 0, 0.0).where(std.notna())


def compute_features(
    bars: pd.DataFrame, cfg: DataConfig, turbulence: np.ndarray, periods_per_year: float
) -> pd.DataFrame:
    """Raw (un-normalised) features for one underlying, indexed like ``bars``; NaN in warm-up rows.

    ``turbulence`` is the market turbulence per bar, aligned with ``bars``; ``periods_per_year`` the
    data's bars a year (``MarketData.clock``), which annualise the realised volatility. Every window
    counts bars, whatever their interval (docs/DATA.md).
    """
    close, high, low = bars["close"], bars["high"], bars["low"]
    with warnings.catch_warnings():
        # ta divides by zero on flat stretches; we mask those
        warnings.simplefilter("ignore", RuntimeWarning)
        adx = ta.trend.ADXIndicator(high, low, close, window=14).adx()
        features = pd.DataFrame(
            {
                "log_return": log_returns(close),
                "macd": ta.trend.MACD(
                    close, window_slow=26, window_fast=12, window_sign=9
                ).macd_diff()
                / close,
                "rsi": ta.momentum.RSIIndicator(close, window=14).rsi(),
                "cci": ta.trend.CCIIndicator(high, low, close, window=20).cci(),
                "adx": adx.where(
                    adx != 0.0
                ),  # ta reports 0.0 while ADX warms up: that is missing, not zero trend
                "bollinger_position": ta.volatility.BollingerBands(
                    close, window=20, window_dev=2
                ).bollinger_pband(),
                "sma_ratio_10": close / close.rolling(10).mean() - 1.0,
                "sma_ratio_30": close / close.rolling(30).mean() - 1.0,
                "realized_vol": realized_vol(close, cfg.vol_window, periods_per_year),
                "volume_zscore": _volume_zscore(bars.get("volume"), bars.index, cfg.volume_window),
                "turbulence": np.log1p(turbulence),
            },
            index=bars.index,
        )
    return features[list(FEATURE_NAMES)].replace([np.inf, -np.inf], np.nan)
