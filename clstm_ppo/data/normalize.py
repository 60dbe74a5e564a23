"""Feature normalisation fitted on the training split alone, saved with every checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

STD_FLOOR = 1e-8  # a constant feature maps to 0, not to a division by zero


@dataclass
class Normalizer:
    names: tuple[str, ...]
    mean: np.ndarray  # (F,)
    std: np.ndarray  # (F,)

    @classmethod
    def fit(cls, train_rows: np.ndarray, names: tuple[str, ...]) -> "Normalizer":
        """Fit on the training rows only: an array (..., F) of raw features."""
        flat = np.asarray(train_rows, dtype=np.float64).reshape(-1, len(names))
        return cls(tuple(names), flat.mean(axis=0), np.maximum(flat.std(axis=0), STD_FLOOR))

    def select(self, names: tuple[str, ...]) -> "Normalizer":
        """The statistics of ``names`` alone (each must be one of this normaliser's)."""
        rows = [self.names.index(n) for n in names]
        return Normalizer(tuple(names), self.mean[rows], self.std[rows])

    def join(self, other: "Normalizer") -> "Normalizer":
        """This normaliser's features, then ``other``'s."""
        return Normalizer(
            (*self.names, *other.names),
            np.concatenate([self.mean, other.mean]),
            np.concatenate([self.std, other.std]),
        )

    def apply(self, raw: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(
            (np.asarray(raw, dtype=np.float64) - self.mean) / self.std, dtype=np.float32
        )

    def state_dict(self) -> dict[str, Any]:
        return {"names": list(self.names), "mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "Normalizer":
        return cls(
            tuple(state["names"]),
            np.asarray(state["mean"], dtype=np.float64),
            np.asarray(state["std"], dtype=np.float64),
        )
