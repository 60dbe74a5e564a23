"""Load -> align -> featurise -> split -> normalise: the arrays the market and env read."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from clstm_ppo.config import Config, DataConfig, check_values
from clstm_ppo.data.builtin import BUILTIN_SOURCES
from clstm_ppo.data.calendar import BarClock, check_one_interval, market_clock
from clstm_ppo.data.errors import DataError
from clstm_ppo.data.features import FEATURE_NAMES, compute_features, log_returns
from clstm_ppo.data.loading import load_bars
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.data.planted import planted_split_ends
from clstm_ppo.data.turbulence import turbulence

SPLITS = ("train", "validation", "test")


@dataclass
class MarketData:
    symbols: list[str]
    dates: pd.DatetimeIndex  # (T,) shared by every underlying
    feature_names: tuple[str, ...]
    features: np.ndarray  # (S, T, F) float32, normalised with training-split statistics
    raw_features: np.ndarray  # (S, T, F) float64, before normalisation
    # open/high/low/close/realized_vol[/volume][/iv[/iv_open]][/rate] -> (S, T) float64
    bars: dict[str, np.ndarray]
    turbulence: np.ndarray  # (T,) raw turbulence, for the trading rule
    turbulence_threshold: float  # quantile of training-split turbulence
    splits: dict[str, tuple[int, int]]  # name -> [start, end) rows
    normalizer: Normalizer
    window: int
    clock: BarClock  # the bars' interval and hours, and the bars a year that annualise every figure
    # (S,) bool: Adj Close put dividends into the prices; None: none did
    dividend_adjusted: np.ndarray | None = None
    # (S,) bool: a broad-based index (margin at index rates); None: none is
    broad_index: np.ndarray | None = None

    @property
    def periods_per_year(self) -> float:
        """Bars a year: the one number every annualised volatility, return and Sharpe ratio uses."""
        return self.clock.periods_per_year

    def split_dates(self, name: str) -> tuple[pd.Timestamp, pd.Timestamp]:
        start, end = self.splits[name]
        return self.dates[start], self.dates[end - 1]


def _check_config(cfg: DataConfig) -> None:
    # the config's own rules, for callers that build a DataConfig directly
    check_values(Config(data=cfg))


def _align(
    frames: dict[str, pd.DataFrame], source: str
) -> tuple[pd.DatetimeIndex, dict[str, pd.DataFrame]]:
    """Keep the dates every underlying has, so turbulence sees one joint return vector per bar."""
    common = None
    for frame in frames.values():
        dates = pd.DatetimeIndex(frame["date"])
        common = dates if common is None else common.intersection(dates)
    if common is None or len(common) < 2:
        if len(frames) == 1:
            raise DataError(
                f"data source '{source}' holds {0 if common is None else len(common)} dated "
                "row(s); give it years of bars (indicator warm-up, the window and three splits)"
            )
        raise DataError(
            f"data source '{source}': its underlyings share fewer than 2 dates; "
            "give files that cover the same period"
        )
    return common, {s: f.set_index("date").loc[common] for s, f in frames.items()}


def _cut_after(
    dates: pd.DatetimeIndex, frames: dict[str, pd.DataFrame], test_end: str | None
) -> tuple[pd.DatetimeIndex, dict[str, pd.DataFrame]]:
    """Drop every bar after ``data.test_end``: a walk-forward fold never holds a bar after its test
    split, so nothing computed from it (features, fits, the walk) can read one."""
    if test_end is None:
        return dates, frames
    keep = int(
        dates.searchsorted(_end_date("data.test_end", test_end) + pd.Timedelta(days=1), side="left")
    )
    return dates[:keep], {s: f.iloc[:keep] for s, f in frames.items()}


def _end_date(key: str, text: str) -> pd.Timestamp:
    try:
        return pd.Timestamp(text)
    except ValueError:
        raise DataError(f"{key} {text!r} is not a date; write YYYY-MM-DD") from None


def _split_bounds(dates: pd.DatetimeIndex, cfg: DataConfig) -> dict[str, tuple[int, int]]:
    builtin = BUILTIN_SOURCES.get(cfg.source)
    default_ends = (
        (builtin.train_end, builtin.val_end)
        if builtin
        else planted_split_ends(cfg.planted)
        if cfg.source == "planted"
        else (None, None)
    )
    train_end = cfg.train_end or default_ends[0]
    val_end = cfg.val_end or default_ends[1]
    if (train_end is None) != (val_end is None):
        raise DataError(
            "set both data.train_end and data.val_end, or neither (then train_frac/val_frac apply)"
        )
    if train_end is None:
        cut1 = int(round(len(dates) * cfg.train_frac))
        cut2 = int(round(len(dates) * (cfg.train_frac + cfg.val_frac)))
    else:
        t_end, v_end = _end_date("data.train_end", train_end), _end_date("data.val_end", val_end)
        if t_end >= v_end:
            raise DataError(
                f"data.train_end ({t_end.date()}) must come before data.val_end ({v_end.date()})"
            )
        if cfg.test_end is not None and v_end >= _end_date("data.test_end", cfg.test_end):
            raise DataError(
                f"data.val_end ({v_end.date()}) must come before data.test_end ({cfg.test_end})"
            )
        # An end date includes its whole day, also for intraday bars.
        cut1 = int(dates.searchsorted(t_end + pd.Timedelta(days=1), side="left"))
        cut2 = int(dates.searchsorted(v_end + pd.Timedelta(days=1), side="left"))
    return {"train": (0, cut1), "validation": (cut1, cut2), "test": (cut2, len(dates))}


def build_market_data(
    cfg: DataConfig, normalizer: Normalizer | None = None, needed: tuple[str, ...] = SPLITS
) -> MarketData:
    """Everything the market and env need, from ``cfg``.

    ``normalizer``: re-apply saved statistics (from a checkpoint) instead of fitting new ones; the
    bar features' part of them, where they go on with the option market's (``market.observed``).
    ``needed``: the splits that must hold a window of bars; a fit that reads only the training
    years of a reference series (the VIX's IV model for a fold of stocks that outlive it) asks
    for ``("train",)``, and the later splits may then be short or empty.
    """
    _check_config(cfg)
    frames = load_bars(cfg.source, cfg.symbols, cfg.synthetic, cfg.planted)
    check_one_interval(frames, cfg.source)
    adjusted = np.array([bool(f.attrs.get("dividend_adjusted", False)) for f in frames.values()])
    dates, frames = _align(frames, cfg.source)
    dates, frames = _cut_after(dates, frames, cfg.test_end)
    symbols = list(frames)
    clock = market_clock(dates, cfg.periods_per_year, cfg.source)
    returns = np.stack([log_returns(frames[s]["close"]).to_numpy() for s in symbols], axis=1)
    turb = turbulence(returns, cfg.turbulence_lookback)
    raw = np.stack(
        [compute_features(frames[s], cfg, turb, clock.periods_per_year).to_numpy() for s in symbols]
    )  # (S, T, F)

    finite_rows = np.isfinite(raw).all(axis=(0, 2))
    if not finite_rows.any():
        raise DataError(
            f"data source '{cfg.source}' has {len(dates)} bars, too few to warm up the indicators "
            f"(turbulence alone needs {cfg.turbulence_lookback + 1}); give a longer history"
        )
    # warm-up rows (indicators, turbulence look-back) are dropped
    first = int(np.argmax(finite_rows))
    holes = np.flatnonzero(~finite_rows[first:])
    if holes.size:
        row = first + holes[0]
        s, f = np.argwhere(~np.isfinite(raw[:, row, :]))[0]
        raise DataError(
            f"data source '{cfg.source}' [symbol {symbols[s]}]: feature '{FEATURE_NAMES[f]}' is "
            f"undefined at {dates[row].date()} (flat prices?); drop or fix the "
            "bars around that date"
        )
    dates = dates[first:]
    raw = raw[:, first:, :]
    turb = turb[first:]
    bars = {
        c: np.stack([frames[s][c].to_numpy(dtype=np.float64)[first:] for s in symbols])
        for c in ("open", "high", "low", "close", "volume", "iv", "iv_open", "rate")
        if all(c in frames[s] for s in symbols)
    }
    bars["realized_vol"] = raw[:, :, FEATURE_NAMES.index("realized_vol")].copy()

    splits = _split_bounds(dates, cfg)
    for name in needed:
        start, end = splits[name]
        if end - start < cfg.window + 1:
            span = f"{dates[start].date()}..{dates[end - 1].date()}" if end > start else "empty"
            raise DataError(
                f"{name} split ({span}, after indicator warm-up) has {end - start} bars, fewer "
                f"than window + 1 = {cfg.window + 1}; move data.train_end/data.val_end "
                "or lower data.window"
            )
    train = slice(*splits["train"])
    if normalizer is None:
        normalizer = Normalizer.fit(raw[:, train, :], FEATURE_NAMES)
    elif normalizer.names[: len(FEATURE_NAMES)] != FEATURE_NAMES:
        raise DataError(
            f"saved normalisation covers features {list(normalizer.names)}, "
            f"this version computes {list(FEATURE_NAMES)}; retrain or use the matching version"
        )
    else:
        # a checkpoint's normaliser may go on with the option market's features (market/observed.py)
        normalizer = normalizer.select(FEATURE_NAMES)
    return MarketData(
        symbols=symbols,
        dates=dates,
        feature_names=FEATURE_NAMES,
        features=normalizer.apply(raw),
        raw_features=raw,
        bars=bars,
        turbulence=turb,
        turbulence_threshold=float(np.quantile(turb[train], cfg.turbulence_quantile)),
        splits=splits,
        normalizer=normalizer,
        window=cfg.window,
        clock=clock,
        dividend_adjusted=adjusted,
        broad_index=np.full(
            len(symbols),
            cfg.source in ("synthetic", "planted")
            or getattr(BUILTIN_SOURCES.get(cfg.source), "broad_index", False),
        ),
    )
