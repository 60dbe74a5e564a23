"""Regime labels per bar from the trailing return and volatility, with thresholds from the
training split alone.

At bar t, over the ``window`` bars ending at t (t included, so a generated path's own
bars define its label):

    crash     trailing return in the training split's worst ``crash_quantile`` tail, or a negative
              return with volatility above the training split's ``1 - crash_quantile`` quantile
              (a fast, violent fall)
    bear      trailing return below the lower tercile
    bull      trailing return above the upper tercile
    sideways  the rest
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

REGIMES = ("bull", "bear", "sideways", "crash")


def trailing(ret: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Trailing sum and std (ddof 0) of ``ret`` (..., T) over ``window`` bars; NaN for the
    first window - 1."""
    r = np.asarray(ret, dtype=np.float64)
    pad = np.zeros((*r.shape[:-1], 1))
    s1 = np.concatenate([pad, np.cumsum(r, axis=-1)], axis=-1)
    s2 = np.concatenate([pad, np.cumsum(r * r, axis=-1)], axis=-1)
    total = np.full(r.shape, np.nan)
    vol = np.full(r.shape, np.nan)
    if r.shape[-1] >= window:
        total[..., window - 1 :] = s1[..., window:] - s1[..., :-window]
        mean = total[..., window - 1 :] / window
        var = (s2[..., window:] - s2[..., :-window]) / window - mean**2
        vol[..., window - 1 :] = np.sqrt(np.maximum(var, 0.0))
    return total, vol


@dataclass(frozen=True)
class RegimeRule:
    window: int
    crash_return: float
    crash_vol: float
    bear_return: float
    bull_return: float

    @classmethod
    def fit(
        cls, train_ret: np.ndarray, window: int = 20, crash_quantile: float = 0.05
    ) -> "RegimeRule":
        """Thresholds from the training split's returns (S, T) only."""
        total, vol = trailing(train_ret, window)
        total, vol = total[np.isfinite(total)], vol[np.isfinite(vol)]
        if total.size == 0:
            raise ValueError(
                f"the training split is shorter than the regime window ({window} bars)"
            )
        return cls(
            window=window,
            crash_return=float(np.quantile(total, crash_quantile)),
            crash_vol=float(np.quantile(vol, 1.0 - crash_quantile)),
            bear_return=float(np.quantile(total, 1 / 3)),
            bull_return=float(np.quantile(total, 2 / 3)),
        )

    def label(self, ret: np.ndarray) -> np.ndarray:
        """Regime index (into REGIMES) per bar of ``ret`` (..., T); the first window - 1 bars, which
        have no full trailing window, take the label of the first bar that has one."""
        total, vol = trailing(ret, self.window)
        labels = np.full(total.shape, REGIMES.index("sideways"), dtype=np.int64)
        labels[total >= self.bull_return] = REGIMES.index("bull")
        labels[total <= self.bear_return] = REGIMES.index("bear")
        crash = (total <= self.crash_return) | ((total < 0) & (vol >= self.crash_vol))
        labels[crash] = REGIMES.index("crash")
        first = min(self.window - 1, total.shape[-1] - 1)
        labels[..., :first] = labels[..., first : first + 1]
        return labels

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "RegimeRule":
        return cls(**state)
