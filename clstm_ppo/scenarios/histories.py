"""Training histories beside the real one (``data.augment_source``): each source gives per-path
loader tables on the real data's dates, which ``augment.augmented_data`` turns into extra
underlyings of the training env.

- ``bootstrap``: a stationary block bootstrap (Politis and Romano, 1994;
  ``arch.bootstrap.StationaryBootstrap``) of whole training bars: each bar keeps its gap, return,
  wicks, volume change, implied vol and rate together, and a path's bars come in blocks of mean
  length ``data.augment_block`` (0: Politis and White's choice on the squared returns). Only the
  training split's bars are drawn.
- ``fhs``: filtered historical simulation (Barone-Adesi et al., 1999; scenarios/baselines.py) of the
  training bars: each path draws whole residual vectors of training bars i.i.d. and runs the
  volatility filter forward from a random training bar's state, so every bar is a training bar's,
  rescaled to the path's own volatility; the real data's rate of each date. Only the training
  split's bars are read.
- ``underlyings``: the underlyings of another data source (``data.augment_underlyings``, e.g. the
  Dow stocks beside the S&P 500), each with its own bars up to the real training split's last date
  and no later, laid end to end (wrapping) onto the real dates, under its own option rules (margin
  rates, dividends in its prices, its own implied vol or the model's).

The prices of a path are rebuilt from its bars' returns (``features.reconstruct``), so a path has no
price jump where blocks meet or a history wraps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from arch.bootstrap import StationaryBootstrap, optimal_block_length

from clstm_ppo.data.builtin import BUILTIN_SOURCES
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.errors import DataError
from clstm_ppo.data.loading import load_bars
from clstm_ppo.scenarios.bar_columns import bar_features, feature_names, reconstruct, split_bars
from clstm_ppo.scenarios.baselines import Fhs


@dataclass
class PathTable:
    """One path's loader table and the option rules it trades under."""

    frame: pd.DataFrame  # date, open, high, low, close[, volume][, iv][, rate]
    broad_index: bool  # margin at index rates
    dividend_adjusted: bool  # dividends are in its prices (options priced with no yield)


def _on_dates(
    prices: dict[str, np.ndarray], dates: pd.DatetimeIndex, rate: np.ndarray | None
) -> pd.DataFrame:
    frame = pd.DataFrame({"date": dates, **{k: v for k, v in prices.items()}})
    if rate is not None:
        frame["rate"] = rate
    return frame


def path_dates(real: MarketData, warm: int) -> pd.DatetimeIndex:
    """``warm`` business days of indicator warm-up before the real first date,
    then the real dates."""
    return pd.bdate_range(end=real.dates[0] - pd.offsets.BDay(1), periods=warm).append(real.dates)


def block_length(train_returns: np.ndarray, asked: float) -> float:
    """The bootstrap's mean block length: ``asked``, or with 0 Politis and White's on the squared
    returns (mean over the underlyings), at least 1."""
    if asked > 0:
        return float(asked)
    return max(
        1.0,
        float(np.mean([optimal_block_length(r**2)["stationary"].iloc[0] for r in train_returns])),
    )


def bootstrap_tables(
    real: MarketData, paths: int, seed: int, warm: int, block: float
) -> list[PathTable]:
    """``paths`` stationary-bootstrap paths of the real training bars, each resampling one
    underlying's (in turn)."""
    names = feature_names(real)
    train = split_bars(real, "train")
    rows = bar_features(train, names)  # (S, T_train - 1, F): bar 0 lends its close only
    rates = train["rate"][:, 1:] if "rate" in train else None
    mean_block = block_length(rows[..., names.index("ret")], block)
    dates = path_dates(real, warm)
    rng = np.random.default_rng(seed)
    tables = []
    for i in range(paths):
        s = i % rows.shape[0]
        draw = StationaryBootstrap(mean_block, np.arange(rows.shape[1]), seed=rng)
        # a path longer than the history wraps
        index = np.resize(next(draw.bootstrap(1))[0][0], len(dates))
        start = {"close": float(train["close"][s, 0])}
        if "volume" in train:
            start["volume"] = float(train["volume"][s, 0])
        prices = reconstruct(rows[s, index][None], names, start)
        frame = _on_dates(
            {k: v[0] for k, v in prices.items()}, dates, None if rates is None else rates[s, index]
        )
        adjusted = bool(real.dividend_adjusted[s]) if real.dividend_adjusted is not None else False
        broad = bool(real.broad_index[s]) if real.broad_index is not None else False
        tables.append(PathTable(frame, broad, adjusted))
    return tables


def real_rates(real: MarketData, warm: int) -> np.ndarray | None:
    """The real data's rate of each date, its first for the warm-up days (None
    without a rate column)."""
    if "rate" not in real.bars:
        return None
    return np.concatenate([np.full(warm, real.bars["rate"][0, 0]), real.bars["rate"][0]])


def fhs_tables(real: MarketData, paths: int, seed: int, warm: int) -> list[PathTable]:
    """``paths`` filtered-historical-simulation paths of the real training bars, from the first real
    close; they trade under the first underlying's option rules, as a generator's paths do."""
    names = feature_names(real)
    train = split_bars(real, "train")
    dates = path_dates(real, warm)
    bars = Fhs.fit(bar_features(train, names), names).sample_features(
        paths, len(dates), None, seed, start="random"
    )
    start = {k: float(real.bars[k][0, 0]) for k in ("close", "volume", "iv") if k in real.bars}
    prices = reconstruct(bars, names, start)
    rate = real_rates(real, warm)
    flag = lambda x: bool(x[0]) if x is not None else False  # noqa: E731
    return [
        PathTable(
            _on_dates({k: v[i] for k, v in prices.items()}, dates, rate),
            flag(real.broad_index),
            flag(real.dividend_adjusted),
        )
        for i in range(paths)
    ]


def underlying_tables(real: MarketData, source: str, warm: int) -> list[PathTable]:
    """One path per underlying of ``source``: its own bars up to the real training split's last
    date, laid end to end onto the real dates (wrapping), with the real data's rate of each date;
    its implied vol column where it has one (else the market takes the model's for it)."""
    last = real.split_dates("train")[1]
    own = load_bars(source)
    spec = BUILTIN_SOURCES.get(source)
    dates = path_dates(real, warm)
    rate = real_rates(real, warm)  # the real day's rate: the same days, the same money market
    tables = []
    for symbol, whole in own.items():
        frame = whole[pd.DatetimeIndex(whole["date"]) <= last]
        if len(frame) < warm:
            raise DataError(
                f"data.augment_underlyings '{source}': {symbol} has {len(frame)} bars up to the "
                f"training split's last date {last.date()}, fewer than the {warm} its indicators "
                "need; pick another source or later split dates"
            )
        # Its implied vol only where the real data has one too: the env reads
        # one kind for every underlying.
        kept = ("open", "high", "low", "close", "volume", *(("iv",) if "iv" in real.bars else ()))
        bars = {k: frame[k].to_numpy(dtype=np.float64)[None] for k in kept if k in frame}
        names = tuple(
            n
            for n in ("gap", "ret", "up", "down", "dvol", "logiv")
            if n not in ("dvol", "logiv") or {"dvol": "volume", "logiv": "iv"}[n] in bars
        )
        rows = bar_features(bars, names)[0]
        index = np.resize(np.arange(len(rows)), len(dates))
        start = {
            "close": float(bars["close"][0, 0]),
            **({"volume": float(bars["volume"][0, 0])} if "volume" in bars else {}),
        }
        prices = reconstruct(rows[index][None], names, start)
        table = _on_dates({k: v[0] for k, v in prices.items()}, dates, rate)
        tables.append(
            PathTable(
                table,
                bool(spec.broad_index) if spec else False,
                bool(whole.attrs.get("dividend_adjusted", False)),
            )
        )
    return tables
