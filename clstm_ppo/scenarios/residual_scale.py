"""The return residual's scale, calibrated after training so the volatility recursion keeps its fitted persistence.

A path feeds its own return residuals z back into the filter's variance recursion (filtering.py):
var' = omega + (alpha + gamma [z < 0]) var z^2 + beta var, so its persistence is alpha E[z^2] + gamma E[z^2; z < 0]
+ beta, 0.993 on the S&P 500's training years. A generator whose z is 10% too wide at high variance makes that
persistence exceed 1 there, and a path that reaches high volatility stays at its cap (measured on the S&P 500 cGAN
before this step: the return's std 5.7 times the training split's by bar 500). The filter assumes i.i.d. residuals,
so in every band of the state's variance the generated z should have the training residuals' E[z^2; z < 0] and
E[z^2; z >= 0]: after training, each band's negative and positive residuals are scaled by the factors that make them
so, measured on the generator's own draws at the training split's states (docs/SCENARIOS.md). The shape, the tails'
weight relative to the body and the dependence on the regime and the other columns stay the network's.

Before that, every coded column the generator draws is moved by one affine map to the training rows' coded mean and
standard deviation (the coded columns are near-Gaussian, so a generator a fifth too wide there puts several times the
training share of its draws in the tails, and the Gaussianising maps turn those into the training split's extremes:
the S&P 500 WGAN-GP's gap residual came out 1.8 times the real one's size before this step).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# bands of the state's log variance, as quantiles of the training states: finer where the volatility runs away
BANDS = (0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.98)
MIN_DRAWS = 200


def _side_moments(z: np.ndarray) -> tuple[float, float]:
    return float(np.mean(z * z * (z < 0))), float(np.mean(z * z * (z >= 0)))


@dataclass(frozen=True)
class Calibration:
    edges: tuple[float, ...]  # log variance band edges (percent^2 units); () for one band
    k_neg: tuple[float, ...]  # factor on negative residuals, per band
    k_pos: tuple[float, ...]
    coded_scale: tuple[float, ...] = ()  # per coded column, applied to each draw first; () for none
    coded_shift: tuple[float, ...] = ()

    @classmethod
    def identity(cls) -> "Calibration":
        return cls((), (1.0,), (1.0,))

    @staticmethod
    def coded_affine(real: np.ndarray, generated: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(scale, shift) per column that move generated coded rows (m, F) to the real rows' (n, F) mean and std."""
        g_std = generated.std(axis=0)
        scale = np.where(g_std > 0, real.std(axis=0) / np.where(g_std > 0, g_std, 1.0), 1.0)
        shift = real.mean(axis=0) - generated.mean(axis=0) * scale
        return tuple(float(v) for v in scale), tuple(float(v) for v in shift)

    def coded(self, g: np.ndarray) -> np.ndarray:
        """Generated coded rows (..., F) after the affine map (unchanged without one)."""
        if not self.coded_scale:
            return g
        return g * np.asarray(self.coded_scale, dtype=g.dtype) + np.asarray(self.coded_shift, dtype=g.dtype)

    @classmethod
    def fit(cls, real_z: np.ndarray, logvar: np.ndarray, draw: Callable[[np.ndarray], np.ndarray],
            bands: tuple[float, ...] = BANDS) -> "Calibration":
        """``real_z`` (n,) training return residuals; ``logvar`` (n,) their states' log variance, or empty for a
        model whose residuals do not depend on the state (one band); ``draw(rows)`` the generator's residuals z
        (m,) at those training rows (indices into the n), as many draws as it likes."""
        neg, pos = _side_moments(real_z)
        edges = tuple(float(e) for e in np.quantile(logvar, bands)) if len(logvar) else ()
        band = np.searchsorted(edges, logvar) if len(logvar) else np.zeros(len(real_z), dtype=np.int64)
        k_neg, k_pos = [], []
        for b in range(len(edges) + 1):
            z = draw(np.flatnonzero(band == b))
            if len(z) < MIN_DRAWS:  # too few to measure: leave the band as drawn
                k_neg.append(1.0)
                k_pos.append(1.0)
                continue
            g_neg, g_pos = _side_moments(z)
            k_neg.append(float(np.sqrt(neg / g_neg)) if g_neg > 0 else 1.0)
            k_pos.append(float(np.sqrt(pos / g_pos)) if g_pos > 0 else 1.0)
        return cls(edges, tuple(k_neg), tuple(k_pos))

    def factor(self, z: np.ndarray, logvar: np.ndarray) -> np.ndarray:
        band = np.searchsorted(self.edges, logvar) if self.edges else np.zeros(len(z), dtype=np.int64)
        return np.where(z < 0, np.asarray(self.k_neg)[band], np.asarray(self.k_pos)[band])

    def state_dict(self) -> dict[str, Any]:
        return {k: list(v) for k, v in asdict(self).items()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "Calibration":
        # coded_scale and coded_shift: absent from checkpoints saved before the affine step, which stay without it
        return cls(*(tuple(state.get(k, ())) for k in ("edges", "k_neg", "k_pos", "coded_scale", "coded_shift")))
