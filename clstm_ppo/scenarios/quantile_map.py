"""The empirical quantile map to a standard normal, for a residual column that the Lambert W family
cannot make Gaussian: one with a point mass (the S&P 500's opening gap is exactly 0 on 52% of its
training days) or tails heavier than the family's largest delta.

With x_(0) <= ... <= x_(n-1) the sorted training values, a value at sorted position k has
probability p = (k + 1/2) / n and maps to u = Phi^-1(p); a run of tied values maps to the middle of
its run, and a value between two training values to the interpolated position. The inverse reads the
position back from Phi(u) and interpolates the sorted values, so a run of ties is a flat stretch:
generated values anywhere in that band of u come back as the tied value, and the point mass is kept.
Training values go forward and back exactly; a generated value outside the training range comes back
as the training extreme (docs/SCENARIOS.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.special import ndtr, ndtri

ATOM_SHARE = 0.05  # a value held by this share of the training rows is a point mass


def has_atom(x: np.ndarray, share: float = ATOM_SHARE) -> bool:
    """Whether one value holds at least ``share`` of the sample."""
    _, counts = np.unique(np.asarray(x).ravel(), return_counts=True)
    return bool(counts.max() >= share * counts.sum()) if len(counts) else False


@dataclass(frozen=True)
class QuantileMap:
    sorted_values: np.ndarray  # (n,) the training sample, sorted

    @classmethod
    def fit(cls, x: np.ndarray) -> "QuantileMap":
        values = np.sort(np.asarray(x, dtype=np.float64).ravel())
        if len(values) < 2:
            raise ValueError("a quantile map needs at least two training values")
        return cls(values)

    @property
    def n(self) -> int:
        return len(self.sorted_values)

    def gaussianise(self, y: np.ndarray) -> np.ndarray:
        unique, first, counts = np.unique(self.sorted_values, return_index=True, return_counts=True)
        middle = first + (counts - 1) / 2.0  # a run of ties maps to the middle of its run
        pos = np.interp(np.asarray(y, dtype=np.float64), unique, middle)
        return ndtri((pos + 0.5) / self.n)

    def heavy(self, u: np.ndarray) -> np.ndarray:
        """The inverse of ``gaussianise``: interpolated training values at the
        position Phi(u) reads."""
        pos = np.clip(ndtr(np.asarray(u, dtype=np.float64)) * self.n - 0.5, 0.0, self.n - 1.0)
        return np.interp(pos, np.arange(self.n), self.sorted_values)

    def heavy_torch(self, u: torch.Tensor) -> torch.Tensor:
        """``heavy`` in torch, differentiable in u (the generators' losses)."""
        values = torch.as_tensor(self.sorted_values, dtype=u.dtype, device=u.device)
        pos = (torch.special.ndtr(u) * self.n - 0.5).clamp(0.0, self.n - 1.0)
        lo = pos.floor().long().clamp(max=self.n - 2)
        frac = pos - lo.to(u.dtype)
        return values[lo] * (1 - frac) + values[lo + 1] * frac

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "quantile", "sorted_values": self.sorted_values.tolist()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "QuantileMap":
        return cls(np.asarray(state["sorted_values"], dtype=np.float64))
