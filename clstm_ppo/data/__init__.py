"""Market data: load OHLCV bars, featurise them once, split by date, normalise on train only."""

from clstm_ppo.data.builtin import BUILTIN_SOURCES
from clstm_ppo.data.dataset import MarketData, build_market_data
from clstm_ppo.data.errors import DataError
from clstm_ppo.data.features import FEATURE_NAMES, compute_features
from clstm_ppo.data.loading import load_bars
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.data.synthetic import generate_synthetic
from clstm_ppo.data.turbulence import turbulence

__all__ = [
    "BUILTIN_SOURCES",
    "DataError",
    "FEATURE_NAMES",
    "MarketData",
    "Normalizer",
    "build_market_data",
    "compute_features",
    "generate_synthetic",
    "load_bars",
    "turbulence",
]
