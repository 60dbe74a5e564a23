"""The per-bar columns a generator learns, their training-split scaling, and their
reconstruction into OHLCV(+iv).

A bar becomes scale-free numbers that need nothing but the previous close to undo:

    gap   = log(open_t / close_{t-1})                      the overnight move
    ret   = log(close_t / close_{t-1})                     close-to-close log return (Quant GANs' r)
    up    = log(high_t / max(open_t, close_t))   >= 0     the wick above the body
    down  = log(min(open_t, close_t) / low_t)    >= 0     the wick below it
    dvol  = log(volume_t / volume_{t-1})                   (where the source has volume)
    logiv = log(iv_t)                                      (where the source has implied vol)

Implied vol is kept as a level, not a change: the generator sees windows of a few dozen bars, and a
level keeps a 252-bar path's vol in the range it learned instead of a random walk that drifts away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from clstm_ppo.data.dataset import MarketData

BASE_COLUMNS = ("gap", "ret", "up", "down")
# a zero-volume bar (a holiday print) counts as one share, so its log change is finite
VOLUME_FLOOR = 1.0
STD_FLOOR = 1e-8


def feature_names(data: MarketData) -> tuple[str, ...]:
    """The columns this data source supports: the four price columns, then volume and
    iv where present."""
    names = list(BASE_COLUMNS)
    if "volume" in data.bars:
        names.append("dvol")
    if "iv" in data.bars:
        names.append("logiv")
    return tuple(names)


def bar_features(bars: dict[str, np.ndarray], names: tuple[str, ...]) -> np.ndarray:
    """(S, T - 1, F) columns of bars 1..T-1 of arrays (S, T); bar 0 only lends its
    close (and volume)."""
    o, h, lo, c = (np.asarray(bars[k], dtype=np.float64) for k in ("open", "high", "low", "close"))
    cols = {
        "gap": np.log(o[:, 1:] / c[:, :-1]),
        "ret": np.log(c[:, 1:] / c[:, :-1]),
        # max(., 0): a bad print with the high below the body is a zero wick, not a negative one
        "up": np.maximum(np.log(h[:, 1:] / np.maximum(o[:, 1:], c[:, 1:])), 0.0),
        "down": np.maximum(np.log(np.minimum(o[:, 1:], c[:, 1:]) / lo[:, 1:]), 0.0),
    }
    if "dvol" in names:
        v = np.log(np.maximum(np.asarray(bars["volume"], dtype=np.float64), VOLUME_FLOOR))
        cols["dvol"] = np.diff(v, axis=1)
    if "logiv" in names:
        cols["logiv"] = np.log(np.asarray(bars["iv"], dtype=np.float64)[:, 1:])
    return np.stack([cols[n] for n in names], axis=-1)


def split_bars(data: MarketData, split: str) -> dict[str, np.ndarray]:
    """The bars of one split, (S, T) each; only rows inside it, so nothing from a
    later split leaks in."""
    start, end = data.splits[split]
    return {k: v[:, start:end] for k, v in data.bars.items()}


@dataclass(frozen=True)
class Scaler:
    """Standardisation with training-split statistics only (never the whole series' min and max)."""

    mean: np.ndarray  # (F,)
    std: np.ndarray  # (F,)

    @classmethod
    def fit(cls, rows: np.ndarray) -> "Scaler":
        flat = np.asarray(rows, dtype=np.float64).reshape(-1, rows.shape[-1])
        return cls(flat.mean(axis=0), np.maximum(flat.std(axis=0), STD_FLOOR))

    def apply(self, x: np.ndarray) -> np.ndarray:
        return ((np.asarray(x, dtype=np.float64) - self.mean) / self.std).astype(np.float32)

    def invert(self, z: np.ndarray) -> np.ndarray:
        return np.asarray(z, dtype=np.float64) * self.std + self.mean

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "Scaler":
        return cls(
            np.asarray(state["mean"], dtype=np.float64), np.asarray(state["std"], dtype=np.float64)
        )


def start_state(data: MarketData, split: str = "train") -> dict[str, float]:
    """Where generated paths start by default: the last bar of ``split`` of the first underlying."""
    _, end = data.splits[split]
    state = {
        "close": float(data.bars["close"][0, end - 1]),
        "date": str(data.dates[end - 1].date()),
    }
    for key in ("volume", "iv", "rate"):
        if key in data.bars:
            state[key] = float(data.bars[key][0, end - 1])
    return state


def reconstruct(
    features: np.ndarray, names: tuple[str, ...], start: dict[str, float]
) -> dict[str, np.ndarray]:
    """OHLCV(+iv) arrays (N, L) from raw (unscaled) columns (N, L, F), continuing
    from ``start``'s close.

    Wicks go through abs(): a generator may emit a slightly negative one, and a bar must keep
    low <= min(open, close) <= max(open, close) <= high with every price positive.
    """
    x = np.asarray(features, dtype=np.float64)
    col = {n: x[..., i] for i, n in enumerate(names)}
    log_close = np.log(start["close"]) + np.cumsum(col["ret"], axis=1)
    close = np.exp(log_close)
    prev = np.exp(
        np.concatenate(
            [np.full((x.shape[0], 1), np.log(start["close"])), log_close[:, :-1]], axis=1
        )
    )
    open_ = prev * np.exp(col["gap"])
    out = {
        "open": open_,
        "close": close,
        "high": np.maximum(open_, close) * np.exp(np.abs(col["up"])),
        "low": np.minimum(open_, close) * np.exp(-np.abs(col["down"])),
    }
    if "dvol" in col:
        base = np.log(max(start.get("volume", 1e6), VOLUME_FLOOR))
        out["volume"] = np.exp(base + np.cumsum(col["dvol"], axis=1))
    if "logiv" in col:
        out["iv"] = np.exp(col["logiv"])
    return out


def paths_frame(
    prices: dict[str, np.ndarray],
    start: dict[str, float],
    first_date: str | None = None,
    prefix: str = "P",
) -> pd.DataFrame:
    """One long table (date, symbol, open, high, low, close[, volume][, iv][, rate]) of N
    paths on business days.

    Every path shares the dates, so the loader aligns them as N underlyings. A constant ``rate``
    (the start state's) is written where the source had one.
    """
    n, length = prices["close"].shape
    begin = (
        pd.Timestamp(first_date) if first_date else pd.Timestamp(start["date"]) + pd.offsets.BDay(1)
    )
    dates = pd.bdate_range(begin, periods=length)
    width = len(str(max(n - 1, 1)))
    frame = pd.DataFrame(
        {
            "date": np.tile(dates.values, n),
            "symbol": np.repeat([f"{prefix}{i:0{width}d}" for i in range(n)], length),
            **{
                k: prices[k].reshape(-1)
                for k in ("open", "high", "low", "close", "volume", "iv")
                if k in prices
            },
        }
    )
    if "rate" in start:
        frame["rate"] = start["rate"]
    return frame
