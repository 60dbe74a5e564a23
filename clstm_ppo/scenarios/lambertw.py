"""Lambert W x Gaussian transforms (Goerg 2011), the heavy-tail ("h") family that
Quant GANs train on.

With u standard normal, the heavy-tailed y = mu + sigma * u * exp(delta * u^2 / 2); its inverse u =
W_delta((y - mu) / sigma), W_delta(z) = sign(z) * sqrt(W(delta * z^2) / delta) with W the principal
branch of Lambert's W (``scipy.special.lambertw``), makes heavy-tailed columns near-Gaussian before
a model learns them, and generated values go back through the forward map, so the tails come back
too (docs/SCENARIOS.md).

``fit`` estimates (mu, sigma, delta) by iterating Goerg's IGMM idea: given mu and sigma, delta is
the value whose back-transformed sample has the excess kurtosis of a normal (0); mu and sigma are
then re-read from that sample.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from scipy.optimize import brentq
from scipy.special import lambertw
from scipy.stats import kurtosis

# delta = 3 already maps a 40-sigma value to about 2.4: heavier columns than that do not occur here
MAX_DELTA = 3.0


def w_delta(z: np.ndarray, delta: float) -> np.ndarray:
    """The inverse of z = u * exp(delta * u^2 / 2), elementwise (identity for delta = 0)."""
    z = np.asarray(z, dtype=np.float64)
    if delta <= 0:
        return z.copy()
    return np.sign(z) * np.sqrt(np.real(lambertw(delta * z * z)) / delta)


def h_delta(u: np.ndarray, delta: float) -> np.ndarray:
    """u * exp(delta * u^2 / 2): the heavy-tailed image of u."""
    u = np.asarray(u, dtype=np.float64)
    return u * np.exp(0.5 * delta * u * u)


def _delta_for(z: np.ndarray) -> float:
    """The delta whose W_delta(z) has excess kurtosis 0; 0 when z is not
    heavier-tailed than a normal."""
    if kurtosis(z) <= 0:
        return 0.0
    gap = lambda d: kurtosis(w_delta(z, d))  # noqa: E731 - decreasing in d
    return float(brentq(gap, 0.0, MAX_DELTA, xtol=1e-10)) if gap(MAX_DELTA) < 0 else MAX_DELTA


@dataclass(frozen=True)
class LambertW:
    mu: float
    sigma: float
    delta: float

    @classmethod
    def fit(cls, x: np.ndarray, iters: int = 50) -> "LambertW":
        """(mu, sigma, delta) of a 1-D sample; a constant sample gets sigma 1 and delta 0 (the
        identity up to a shift)."""
        x = np.asarray(x, dtype=np.float64).ravel()
        mu, sigma, delta = float(np.median(x)), float(x.std()), 0.0
        if sigma <= 0:
            return cls(mu, 1.0, 0.0)
        for _ in range(iters):
            z = (x - mu) / sigma
            delta_new = _delta_for(z)
            u = w_delta(z, delta_new)
            mu, sigma = mu + sigma * float(u.mean()), sigma * float(u.std())
            if abs(delta_new - delta) < 1e-8:
                delta = delta_new
                break
            delta = delta_new
        return cls(mu, sigma, delta)

    def gaussianise(self, y: np.ndarray) -> np.ndarray:
        return w_delta((np.asarray(y, dtype=np.float64) - self.mu) / self.sigma, self.delta)

    def heavy(self, u: np.ndarray) -> np.ndarray:
        """The forward map: the inverse of ``gaussianise``."""
        return self.mu + self.sigma * h_delta(u, self.delta)

    def heavy_torch(self, u: torch.Tensor) -> torch.Tensor:
        """``heavy`` in torch, differentiable in u (the generators' losses)."""
        return self.mu + self.sigma * u * torch.exp(0.5 * self.delta * u * u)

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "lambert_w", **asdict(self)}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "LambertW":
        return cls(*(float(state[k]) for k in ("mu", "sigma", "delta")))
