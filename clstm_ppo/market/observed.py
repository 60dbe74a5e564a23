"""What the agent observes of a market: the bar features of ``data.features`` and, with
``data.option_features``, the option market's own state, read from the implied vol the env prices
with (docs/ENVIRONMENT.md, "What the agent sees").

The option features of underlying s at bar t, each reading bars up to t only:

- ``iv``: the 30-day at-the-money implied vol at t's close, as the market quotes it (the VIX scaled
  to at-the-money, a file's ``iv`` column, or the fitted model: ``market.inputs.market_inputs``);
- ``iv_premium``: ``iv`` less the realized vol of the last ``data.vol_window`` bars (the variance
  risk premium in vol points: an option seller's edge is larger when it is);
- ``iv_change_5``, ``iv_change_20``: ``iv`` less its value 5 and 20 bars before (0 before
  the data's first bar);
- ``iv_zscore``: ``iv`` against its mean and standard deviation over the trailing year
  (``data.periods_per_year`` bars; from 20 bars on, 0 before, and 0 where the year was flat).

They are normalised like the bar features, with statistics of the training split alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from clstm_ppo.config import Config, DataConfig, MarketConfig
from clstm_ppo.data.dataset import MarketData, build_market_data
from clstm_ppo.data.errors import DataError
from clstm_ppo.data.features import FEATURE_NAMES
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.market.inputs import market_inputs

OPTION_FEATURE_NAMES = ("iv", "iv_premium", "iv_change_5", "iv_change_20", "iv_zscore")
ZSCORE_MIN_BARS = 20  # a z-score over fewer bars than a month says little


def option_feature_values(data: MarketData, market: MarketConfig) -> np.ndarray:
    """(S, T, len(OPTION_FEATURE_NAMES)) raw option features of ``data`` under
    ``market``'s implied vol."""
    iv = pd.DataFrame(market_inputs(data, market).iv_close.T)  # (T, S): one column an underlying
    realized = data.raw_features[:, :, data.feature_names.index("realized_vol")].T
    # before the first bar: its value, no change
    before = lambda k: iv.shift(k).fillna(iv.iloc[0])  # noqa: E731
    rolling = iv.rolling(
        max(int(data.periods_per_year), ZSCORE_MIN_BARS), min_periods=ZSCORE_MIN_BARS
    )
    mean, std = rolling.mean(), rolling.std()
    zscore = ((iv - mean) / std).where(std > 0, 0.0).fillna(0.0)
    columns = [iv, iv - realized, iv - before(5), iv - before(20), zscore]
    return np.stack([c.to_numpy(dtype=np.float64).T for c in columns], axis=-1)


def with_option_features(
    data: MarketData, market: MarketConfig, saved: Normalizer | None = None
) -> MarketData:
    """``data`` with the option features after its bar features, normalised with the training
    split's statistics (or the option part of ``saved``, a checkpoint's normaliser)."""
    raw = option_feature_values(data, market)
    if saved is None:
        normalizer = Normalizer.fit(raw[:, slice(*data.splits["train"])], OPTION_FEATURE_NAMES)
    else:
        normalizer = saved.select(OPTION_FEATURE_NAMES)
    return dataclasses.replace(
        data,
        feature_names=(*data.feature_names, *OPTION_FEATURE_NAMES),
        features=np.concatenate([data.features, normalizer.apply(raw)], axis=-1),
        raw_features=np.concatenate([data.raw_features, raw], axis=-1),
        normalizer=data.normalizer.join(normalizer),
    )


def observed_feature_names(option_features: bool) -> tuple[str, ...]:
    """The features an agent with ``data.option_features`` set so observes, in order."""
    return (*FEATURE_NAMES, *OPTION_FEATURE_NAMES) if option_features else FEATURE_NAMES


def add_observed_features(
    data: MarketData, data_cfg: DataConfig, market: MarketConfig, saved: Normalizer | None = None
) -> MarketData:
    """``data`` (from ``build_market_data``) as an agent of these settings observes it: with the
    option features where ``data_cfg.option_features`` says so."""
    return with_option_features(data, market, saved) if data_cfg.option_features else data


def observed_market_data(cfg: Config, normalizer: Normalizer | None = None) -> MarketData:
    """The market data an agent of ``cfg`` trains, walks and predicts on: ``build_market_data`` and,
    with ``data.option_features``, the option features under ``cfg.market``. ``normalizer``: a
    checkpoint's saved one, which must cover exactly these features."""
    names = observed_feature_names(cfg.data.option_features)
    if normalizer is not None and normalizer.names != names:
        raise DataError(
            f"saved normalisation covers features {list(normalizer.names)}, this config observes "
            f"{list(names)}; retrain, or set data.option_features as the checkpoint was trained"
        )
    return add_observed_features(
        build_market_data(cfg.data, normalizer), cfg.data, cfg.market, normalizer
    )
