"""The return residual's scale, calibrated after training so the volatility recursion keeps
its fitted persistence.

A path feeds its own return residuals z back into the filter's variance recursion
(filtering.py): var' = omega + (alpha + gamma [z < 0]) var z^2 + beta var, so its persistence is
alpha E[z^2] + gamma E[z^2; z < 0]
+ beta, 0.993 on the S&P 500's training years. A generator whose z is 10% too wide at
  high variance makes that
persistence exceed 1 there, and a path that reaches high volatility stays at its cap (measured on
the S&P 500 cGAN before this step: the return's std 5.7 times the training split's by bar 500). The
filter assumes i.i.d. residuals, so in every band of the state's variance the generated z should
have the training residuals' E[z^2; z < 0] and E[z^2; z >= 0]: after training, each band's negative
and positive residuals are scaled by the factors that make them so, measured on the generator's own
draws at the training split's states (docs/SCENARIOS.md). The shape, the tails' weight relative to
the body and the dependence on the regime and the other columns stay the network's.

Before that, every coded column the generator draws is mapped onto the training rows' coded
distribution by quantile mapping (each draw's quantile among the generator's draws at the training
states is read off the real rows' quantiles): the coded columns are near-Gaussian, so a generator a
little too wide there puts several times the training share of its draws in the tails, which the
Gaussianising maps turn into the training split's extremes (the S&P 500 WGAN-GP's gap residual came
out 1.8 times the real one's size without this step, 1.2 times after matching only the mean and
std). Each column's marginal is then the real one's; how a draw depends on its state, its regime and
the other columns stays the network's. A conditional model's draws are mapped per regime, onto the
training rows of that regime, where the regime has enough of them: one pooled map pulls every
regime's residuals to the mixture's shape (the S&P 500 cGAN's paths had a median kurtosis of 5.04
and EMD above GARCH-t's at lags 20 and 100 with one; 3.83 and below it at every lag with maps per
regime: docs/SCENARIOS.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# bands of the state's log variance, as quantiles of the training states: finer
# where the volatility runs away
BANDS = (0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.98)
MIN_DRAWS = 200
QUANTILE_LEVELS = 1001  # coded quantiles kept per column for the quantile map
TIE_STEP = 1e-12
# real training rows a regime needs for a map of its own (else it takes the pooled map)
MIN_REGIME_ROWS = 100

# per coded column, the values at QUANTILE_LEVELS probabilities
Quantiles = tuple[tuple[float, ...], ...]


def _side_moments(z: np.ndarray) -> tuple[float, float]:
    return float(np.mean(z * z * (z < 0))), float(np.mean(z * z * (z >= 0)))


@dataclass(frozen=True)
class Calibration:
    edges: tuple[float, ...]  # log variance band edges (percent^2 units); () for one band
    k_neg: tuple[float, ...]  # factor on negative residuals, per band
    k_pos: tuple[float, ...]
    coded_from: Quantiles = ()  # per coded column, the generator's quantiles; () for none
    coded_to: Quantiles = ()  # the real rows' quantiles at the same levels
    # per regime, its own map; () for a regime on the pooled one
    regime_from: tuple[Quantiles, ...] = ()
    regime_to: tuple[Quantiles, ...] = ()

    @classmethod
    def identity(cls) -> "Calibration":
        return cls((), (1.0,), (1.0,))

    @staticmethod
    def coded_quantiles(
        real: np.ndarray, generated: np.ndarray, levels: int = QUANTILE_LEVELS
    ) -> tuple[Quantiles, Quantiles]:
        """(from, to): per column, the generated (m, F) and real (n, F) coded rows' quantiles at
        ``levels`` evenly spaced probabilities; the generator's are made strictly increasing so the
        map is a function."""
        p = np.linspace(0.0, 1.0, levels)
        src = np.quantile(generated, p, axis=0).T
        # a flat run (ties) still maps
        src = np.maximum.accumulate(src, axis=1) + np.arange(levels) * TIE_STEP
        dst = np.quantile(real, p, axis=0).T
        return tuple(tuple(map(float, r)) for r in src), tuple(tuple(map(float, r)) for r in dst)

    @classmethod
    def regime_quantiles(
        cls,
        real: np.ndarray,
        real_labels: np.ndarray,
        generated: np.ndarray,
        generated_labels: np.ndarray,
        regimes: int,
    ) -> tuple[tuple[Quantiles, ...], ...]:
        """(from, to) per regime: the map of the generated rows drawn with that label onto the
        real rows with it; () for a regime with fewer than MIN_REGIME_ROWS real rows or
        MIN_REGIME_ROWS draws."""
        src, dst = [], []
        for k in range(regimes):
            r, g = real[real_labels == k], generated[generated_labels == k]
            pair = cls.coded_quantiles(r, g) if min(len(r), len(g)) >= MIN_REGIME_ROWS else ((), ())
            src.append(pair[0])
            dst.append(pair[1])
        return tuple(src), tuple(dst)

    def coded(self, g: np.ndarray, regimes: np.ndarray | None = None) -> np.ndarray:
        """Generated coded rows (..., F) after the quantile map (unchanged without one); a draw
        beyond the generator's measured range maps to the real extreme. ``regimes`` (...): each
        row's label, for a calibration with maps per regime."""
        if not self.coded_from:
            return g
        if regimes is None or not self.regime_from:
            return _mapped(g, self.coded_from, self.coded_to)
        regimes = np.broadcast_to(np.asarray(regimes), g.shape[:-1])
        out = np.empty_like(g)
        pooled = np.ones(g.shape[:-1], dtype=bool)  # rows of a regime without a map of its own
        for k, (src, dst) in enumerate(zip(self.regime_from, self.regime_to, strict=True)):
            rows = regimes == k
            if src and rows.any():
                out[rows] = _mapped(g[rows], src, dst)
                pooled &= ~rows
        if pooled.any():
            out[pooled] = _mapped(g[pooled], self.coded_from, self.coded_to)
        return out

    @classmethod
    def fit(
        cls,
        real_z: np.ndarray,
        logvar: np.ndarray,
        draw: Callable[[np.ndarray], np.ndarray],
        bands: tuple[float, ...] = BANDS,
    ) -> "Calibration":
        """``real_z`` (n,) training return residuals; ``logvar`` (n,) their states' log variance,
        or empty for a model whose residuals do not depend on the state (one band); ``draw(rows)``
        the generator's residuals z (m,) at those training rows (indices into the n), as many
        draws as it likes."""
        neg, pos = _side_moments(real_z)
        edges = tuple(float(e) for e in np.quantile(logvar, bands)) if len(logvar) else ()
        band = (
            np.searchsorted(edges, logvar) if len(logvar) else np.zeros(len(real_z), dtype=np.int64)
        )
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
        band = (
            np.searchsorted(self.edges, logvar) if self.edges else np.zeros(len(z), dtype=np.int64)
        )
        return np.where(z < 0, np.asarray(self.k_neg)[band], np.asarray(self.k_pos)[band])

    def state_dict(self) -> dict[str, Any]:
        return {k: list(v) for k, v in asdict(self).items()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "Calibration":
        # coded_from/coded_to (regime_from/regime_to): absent from checkpoints saved before the
        # quantile map (before the maps per regime), which sample as they did
        flat = (tuple(state[k]) for k in ("edges", "k_neg", "k_pos"))
        nested = (tuple(tuple(r) for r in state.get(k, ())) for k in ("coded_from", "coded_to"))
        per_regime = (
            tuple(tuple(tuple(r) for r in q) for q in state.get(k, ()))
            for k in ("regime_from", "regime_to")
        )
        return cls(*flat, *nested, *per_regime)


def _mapped(g: np.ndarray, src: Quantiles, dst: Quantiles) -> np.ndarray:
    out = np.empty_like(g)
    for i, (a, b) in enumerate(zip(src, dst, strict=True)):
        out[..., i] = np.interp(g[..., i], a, b)
    return out
