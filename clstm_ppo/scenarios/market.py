"""Generated paths as MarketData the env walks: for stress tests (evaluate
--scenarios) and augmentation.

Each path becomes its own MarketData, built by the project's own pipeline from a file: the last real
bars up to the generator's training-split end (enough for the indicators' and turbulence's warm-up
and two splits of ``window + 1`` bars), then the generated bars. The file's split dates put every
generated bar, and nothing else, in its ``test`` split, so a walk of split ``test`` walks exactly
the path, with windows that reach back into real history. One underlying per MarketData keeps
turbulence what it is on a one-symbol source (the squared z-score of the return): N independent
paths side by side would make it a statistic of unrelated series.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clstm_ppo.config import ConfigError, DataConfig, MarketConfig
from clstm_ppo.config.fields import from_dict
from clstm_ppo.data.dataset import MarketData, build_market_data
from clstm_ppo.data.errors import DataError
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.market.observed import add_observed_features
from clstm_ppo.scenarios.bar_columns import feature_names
from clstm_ppo.scenarios.generator import load_generator

# bars beyond the turbulence look-back, for the slowest indicator (MACD 26 + 9) and ADX
WARMUP_MARGIN = 60


def history_frame(real: MarketData, bars: int) -> pd.DataFrame:
    """The last ``bars`` real bars of the first underlying up to the training split's end,
    as a loader table."""
    end = real.splits["train"][1]
    if end < bars:
        raise DataError(
            f"the training split has {end} bars after warm-up, fewer than the {bars} a generated "
            "path's history needs; lower data.turbulence_lookback or data.window"
        )
    cols = {
        k: real.bars[k][0, end - bars : end]
        for k in ("open", "high", "low", "close", "volume", "iv", "rate")
        if k in real.bars
    }
    return pd.DataFrame({"date": real.dates[end - bars : end], **cols})


def sample_market_data(
    generator: Any,
    paths: int,
    length: int = 252,
    regime: str | None = None,
    seed: int = 0,
    data_config: DataConfig | None = None,
    normalizer: Normalizer | None = None,
    market: MarketConfig | None = None,
) -> list[MarketData]:
    """One MarketData per generated path, its ``test`` split the ``length`` generated bars.

    ``generator``: a FittedGenerator, its checkpoint's path, or a baseline source (sources.py).
    ``data_config``: the agent's data settings (window, indicator windows); default: the generator's
    own. ``normalizer``: the agent checkpoint's feature statistics; default: the real training
    split's. ``market``: the agent's market settings; with them each path also carries the option
    market's features where ``data_config.option_features`` says so (market/observed.py), as the
    agent observes them.
    """
    gen = load_generator(generator) if isinstance(generator, (str, Path)) else generator
    gen.check_regime(regime)
    saved = from_dict(DataConfig, gen.data["config"]) if "config" in gen.data else DataConfig()
    cfg = replace(data_config or saved, source=saved.source, symbols=saved.symbols)
    real = build_market_data(cfg)
    need = cfg.turbulence_lookback + 1 + 2 * (cfg.window + 1) + WARMUP_MARGIN
    history = history_frame(real, need)
    last = pd.Timestamp(history["date"].iloc[-1])
    train_end = pd.Timestamp(history["date"].iloc[-(cfg.window + 2)])
    start = {
        k: float(history[k].iloc[-1]) for k in ("close", "volume", "iv", "rate") if k in history
    }
    start["date"] = str(last.date())
    frame = gen.sample_frame(paths, length, regime, seed, start=start)
    out = []
    with tempfile.TemporaryDirectory(prefix="clstm_ppo-scenarios-") as folder:
        for symbol, path_rows in frame.groupby("symbol", sort=True):
            table = pd.concat([history, path_rows.drop(columns="symbol")], ignore_index=True)
            if "rate" in table:
                table["rate"] = table["rate"].ffill()
            file = Path(folder) / f"{symbol}.parquet"
            table.to_parquet(file, index=False)
            built = build_market_data(
                replace(
                    cfg,
                    source=str(file),
                    symbols=None,
                    train_end=str(train_end.date()),
                    val_end=str(last.date()),
                    periods_per_year=real.periods_per_year,
                ),
                normalizer=normalizer or real.normalizer,
            )
            # the split is the path, no more
            assert built.splits["test"][1] - built.splits["test"][0] == length
            if market is not None:
                built = add_observed_features(built, cfg, market, normalizer)
            out.append(built)
    return out


def path_closes(markets: list[MarketData]) -> np.ndarray:
    """(N, L) closes of the generated bars of each MarketData from sample_market_data."""
    return np.stack(
        [m.bars["close"][0, m.splits["test"][0] : m.splits["test"][1]] for m in markets]
    )


def check_fits(gen: Any, data: MarketData, what: str) -> None:
    """A one-line ConfigError unless ``gen`` generates the columns ``data`` has (volume, iv): paths
    of another feature set would give the agent a market it never saw (e.g. a model iv where it
    learned on the VIX)."""
    mine = feature_names(data)
    if gen.feature_names != mine:
        raise ConfigError(
            f"{what}: the generator makes columns {', '.join(gen.feature_names)} "
            f"(fitted on {', '.join(gen.data.get('symbols', ['?']))}), the agent's data has "
            f"{', '.join(mine)}; train a generator on the agent's data source"
        )
