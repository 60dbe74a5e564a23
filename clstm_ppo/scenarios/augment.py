"""Training augmentation (``data.augment``): more histories beside the real ones, in
the training env only.

A pool of paths is built once, seeded by the run's seed, from ``data.augment_source``: a scenario
generator (``generator``, ``data.augment_checkpoint``), a stationary bootstrap of the real training
bars (``bootstrap``), filtered historical simulation of them (``fhs``), or another data source's
underlyings up to the real training split's end (``underlyings``, scenarios/histories.py). Each path
lies on the real data's own dates (the same T axis), so the augmented MarketData is the real one
with extra rows of S: real symbols first, unchanged, then ``GEN00``, ``GEN01``, ... Random episode
starts draw a pool path with total chance ``data.augment`` (``symbol_weights``). The trainer keeps
the real MarketData for every validation walk and saves the real normaliser; validation and test
walks never see the pool.

Each path is built by the data layer from a file (the loader's checks, the indicators, a one-symbol
turbulence feature of its own) and normalised with the REAL training split's statistics. Shared with
the real data: the turbulence the trading rule reads (one (T,) series per MarketData: the real
market's) and its threshold, and, for generated paths and other underlyings, the risk-free rate of
each date (a bootstrapped bar keeps its own).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from clstm_ppo.config import Config, ConfigError
from clstm_ppo.data.dataset import MarketData, build_market_data
from clstm_ppo.data.errors import DataError
from clstm_ppo.market.inputs import market_inputs
from clstm_ppo.market.observed import add_observed_features
from clstm_ppo.scenarios.bar_columns import bar_features, feature_names, reconstruct, split_bars
from clstm_ppo.scenarios.generator import FittedGenerator, load_generator
from clstm_ppo.scenarios.histories import (
    PathTable,
    bootstrap_tables,
    fhs_tables,
    path_dates,
    real_rates,
    underlying_tables,
)
from clstm_ppo.scenarios.market import WARMUP_MARGIN, check_fits

PREFIX = "GEN"
# a generated path further from its first close than a random walk at the real vol goes
DRIFT_SIGMAS = 10.0


def _labels(gen: FittedGenerator, real: MarketData, paths: int, warm: int) -> np.ndarray | None:
    """(N, warm + T) regime labels for a conditional model: the real training bars' own labels
    (thresholds from the generator's rule), so the pool's calm and crash spells come in the
    proportions and order the training period had; one regime drawn for 18 years of bars would
    make a whole path a crash. Rows after the training split (never read by the training env)
    keep its last label."""
    if gen.regimes is None:
        return None
    names = feature_names(real)
    ret = bar_features(split_bars(real, "train"), names)[0, :, names.index("ret")]
    train = gen.regimes.label(ret)
    train = np.concatenate([train[:1], train])  # bar_features drops bar 0: it lends its close only
    n_rest = len(real.dates) - len(train)
    row = np.concatenate([np.full(warm, train[0]), train, np.full(n_rest, train[-1])])
    return np.tile(row, (paths, 1))


def check_prices(close: np.ndarray, real_vol: float, what: str) -> None:
    """A one-line ConfigError when a generated path's close (N, T) is not finite or moves further
    from its first than DRIFT_SIGMAS standard deviations of a random walk with the real training
    returns' bar volatility ``real_vol`` over T bars (S&P 500, 4,500 bars: a factor of ~6,000). A
    generator whose returns drift (a tiny budget, a collapsed network) takes prices to 1e-19 of
    their start, where the option grid and the losses break (training stopped on a NaN loss after
    minutes per update) instead of saying why."""
    moved = np.log(close / close[:, :1])
    limit = DRIFT_SIGMAS * real_vol * np.sqrt(close.shape[1])
    bad = ~np.isfinite(moved) | (np.abs(moved) > limit)
    if bad.any():
        i = int(np.argmax(bad.any(axis=1)))
        finite = moved[i][np.isfinite(moved[i])]
        far = finite[np.argmax(np.abs(finite))] if finite.size else np.nan
        raise ConfigError(
            f"{what}: generated path {i}'s close reaches {np.exp(far):.3g} times its first over "
            f"{close.shape[1]:,} bars, past {np.exp(-limit):.3g}..{np.exp(limit):.3g} "
            f"({DRIFT_SIGMAS:g} standard deviations of a random walk at the real training "
            "volatility): the generator's returns drift; check its report (python -m "
            "clstm_ppo.scenarios report) and train it longer, or use data.augment_source=fhs"
        )


def _path_frames(
    gen: FittedGenerator, real: MarketData, paths: int, seed: int, warm: int, what: str
) -> list[pd.DataFrame]:
    """One loader table per path: ``warm`` business days of warm-up before the real first date, then
    the real dates, starting from the real first bar's close (and volume, iv)."""
    start = {k: float(real.bars[k][0, 0]) for k in ("close", "volume", "iv") if k in real.bars}
    length = warm + len(real.dates)
    # from random training bars' states: the pool's paths are as long as the whole real history
    bars = gen.sample_features(
        paths, length, None, seed, labels=_labels(gen, real, paths, warm), start="random"
    )
    prices = reconstruct(bars, gen.feature_names, start)
    real_close = split_bars(real, "train")["close"]
    check_prices(
        np.asarray(prices["close"]), float(np.std(np.diff(np.log(real_close), axis=1))), what
    )
    dates = path_dates(real, warm)
    rate = real_rates(real, warm)  # the real day's rate: the same days, the same money market
    frames = []
    for i in range(paths):
        cols = {
            k: prices[k][i] for k in ("open", "high", "low", "close", "volume", "iv") if k in prices
        }
        frame = pd.DataFrame({"date": dates, **cols})
        if rate is not None:
            frame["rate"] = rate
        frames.append(frame)
    return frames


def _bar(one: MarketData, key: str) -> np.ndarray:
    """A bar column of a generated path; ``iv_open`` (which it has no print of) is the previous
    close's iv, as the market reads a source without opens."""
    if key in one.bars:
        return one.bars[key]
    iv = one.bars["iv"]
    return np.concatenate([iv[:, :1], iv[:, :-1]], axis=1)


def _on_real_dates(built: MarketData, real: MarketData, symbol: str) -> np.ndarray:
    rows = built.dates.get_indexer(real.dates)
    if (rows < 0).any():
        raise DataError(
            f"augmentation: generated path {symbol} lacks {int((rows < 0).sum())} of the real "
            "dates after its warm-up; raise the warm-up (scenarios/augment.py)"
        )
    return rows


def check_fitted_before(gen: FittedGenerator, real: MarketData, what: str) -> None:
    """A one-line ConfigError when ``gen`` was fitted on bars after the run's training split: its
    paths would carry the years the run is validated and tested on (a walk-forward fold needs a
    generator of its own training years)."""
    fitted_to, train_last = gen.data.get("train_last"), real.split_dates("train")[1]
    if fitted_to and pd.Timestamp(fitted_to) > train_last:
        raise ConfigError(
            f"{what}: the generator was fitted on bars up to {fitted_to}, after this run's "
            f"training split ends ({train_last.date()}), so its paths would carry the years this "
            "run is validated and tested on; fit one on this run's training years (python -m "
            "clstm_ppo.scenarios train with this run's data settings)"
        )


def pool_tables(
    real: MarketData, cfg: Config, warm: int, generator: FittedGenerator | None = None
) -> list[PathTable]:
    """The pool's loader tables from ``data.augment_source``, on the real dates after
    ``warm`` warm-up days."""
    d = cfg.data
    if d.augment_source == "bootstrap":
        return bootstrap_tables(real, d.augment_paths, cfg.seed, warm, d.augment_block)
    if d.augment_source == "fhs":
        return fhs_tables(real, d.augment_paths, cfg.seed, warm)
    if d.augment_source == "underlyings":
        return underlying_tables(real, d.augment_underlyings, warm)
    gen = generator or load_generator(d.augment_checkpoint)
    check_fits(gen, real, f"data.augment_checkpoint {d.augment_checkpoint}")
    check_fitted_before(gen, real, f"data.augment_checkpoint {d.augment_checkpoint}")
    # a generated path trades as the first
    flags = lambda x: bool(x[0]) if x is not None else False  # noqa: E731
    return [
        PathTable(frame, flags(real.broad_index), flags(real.dividend_adjusted))
        for frame in _path_frames(
            gen,
            real,
            d.augment_paths,
            cfg.seed,
            warm,
            f"data.augment_checkpoint {d.augment_checkpoint}",
        )
    ]


def _with_model_iv(one: MarketData, cfg: Config) -> MarketData:
    """A path without an implied-vol column beside real data with one: the model's, as a column (in
    the column's variance-swap terms, which the market scales to at-the-money), so every
    underlying's is read one way."""
    iv = market_inputs(one, replace(cfg.market, iv_source="model")).iv_close / cfg.market.atm_per_iv
    return replace(
        one, bars={**one.bars, "iv": iv, "iv_open": np.concatenate([iv[:, :1], iv[:, :-1]], axis=1)}
    )


def augmented_data(
    real: MarketData, cfg: Config, generator: FittedGenerator | None = None
) -> tuple[MarketData, list[float]]:
    """The training env's data (real underlyings, then the pool's paths on the same dates) and the
    symbol weights that give the pool total chance ``data.augment`` at a random start."""
    d = cfg.data
    # Indicators (MACD 26 + 9, ADX) and the path's own one-symbol turbulence warm
    # up before the first real date.
    warm = d.turbulence_lookback + 1 + WARMUP_MARGIN + max(d.vol_window, d.volume_window)
    tables = pool_tables(real, cfg, warm, generator)
    width = len(str(max(len(tables) - 1, 1)))
    symbols = [f"{PREFIX}{i:0{width}d}" for i in range(len(tables))]
    train_last, val_last = (str(real.split_dates(s)[1].date()) for s in ("train", "validation"))
    built = []
    with tempfile.TemporaryDirectory(prefix="clstm_ppo-augment-") as folder:
        for symbol, table in zip(symbols, tables, strict=True):
            file = Path(folder) / f"{symbol}.parquet"
            table.frame.to_parquet(file, index=False)
            # the path's bars annualise as the real ones do (its warm-up
            # days would not move a daily clock)
            one = build_market_data(
                replace(
                    d,
                    source=str(file),
                    symbols=None,
                    train_end=train_last,
                    val_end=val_last,
                    augment=0.0,
                    augment_checkpoint="",
                    periods_per_year=real.periods_per_year,
                ),
                normalizer=real.normalizer,
            )
            one = replace(
                one,
                dividend_adjusted=np.array([table.dividend_adjusted]),
                broad_index=np.array([table.broad_index]),
            )
            if "iv" in real.bars and "iv" not in one.bars:
                one = _with_model_iv(one, cfg)
            one = add_observed_features(one, d, cfg.market, real.normalizer)
            built.append((one, _on_real_dates(one, real, symbol)))

    def stack(real_rows: np.ndarray, pick: Callable[[MarketData], np.ndarray]) -> np.ndarray:
        return np.concatenate([real_rows, *[pick(one)[:, rows] for one, rows in built]], axis=0)

    def flags(real_flags: np.ndarray | None, name: str) -> np.ndarray | None:
        return (
            None
            if real_flags is None
            else np.concatenate([real_flags, [getattr(t, name) for t in tables]])
        )

    data = replace(
        real,
        symbols=[*real.symbols, *symbols],
        features=stack(real.features, lambda one: one.features),
        raw_features=stack(real.raw_features, lambda one: one.raw_features),
        bars={k: stack(v, lambda one, k=k: _bar(one, k)) for k, v in real.bars.items()},
        dividend_adjusted=flags(real.dividend_adjusted, "dividend_adjusted"),
        broad_index=flags(real.broad_index, "broad_index"),
    )
    s, n = len(real.symbols), len(tables)
    weights = [(1.0 - d.augment) / s] * s + [d.augment / n] * n
    return data, weights
