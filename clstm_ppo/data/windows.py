"""The normalised feature table on a device and the market windows LSTM 1 reads from it.

Every consumer of windows (the env's observations, the PPO update replaying stored bars,
pretraining, the trainer's per-bar code cache) names a bar by its flat row ``sym * T + t``, so one
object owns the table, the gather and which rows of a split may be observed. Kept out of
``clstm_ppo.data``'s package exports so that loading and featurising data need not import torch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from clstm_ppo.data.dataset import MarketData


class MarketWindows:
    """The (S * T, F) float32 feature table of every underlying, and its TW-bar
    windows by flat row."""

    def __init__(self, data: MarketData, split: str, device: torch.device | str = "cpu"):
        if split not in data.splits:
            raise ValueError(f"unknown split {split!r}; choose one of {', '.join(data.splits)}")
        self.device = torch.device(device)
        self.window = data.window
        self.n_symbols, self.n_bars = data.features.shape[:2]
        self.split_start, self.split_end = data.splits[split]
        # A window may reach back into earlier splits' bars (they are past), but
        # not before the data's first bar.
        self.first_bar = max(self.split_start, self.window - 1)
        self.feature_rows = (
            torch.as_tensor(np.asarray(data.features), dtype=torch.float32, device=self.device)
            .reshape(self.n_symbols * self.n_bars, -1)
            .contiguous()
        )
        n_rows, n_features = self.feature_rows.shape
        # One (overlapping) row per window start: a window is TW consecutive
        # table rows, one contiguous block.
        self._window_starts = self.feature_rows.as_strided(
            (n_rows - self.window + 1, self.window * n_features), (n_features, 1)
        )

    def gather(self, rows: Tensor) -> Tensor:
        """Feature windows (..., TW, F) ending at flat rows ``rows`` (``Observation.row``,
        stored rollout rows).

        Selecting rows of the strided view copies N whole blocks, faster than gathering N x TW
        single rows, and no table of windows is kept in memory.
        """
        return self._window_starts.index_select(0, (rows - (self.window - 1)).reshape(-1)).view(
            *rows.shape, self.window, -1
        )

    def observable_rows(self) -> Tensor:
        """Flat rows of every bar of the split a copy can observe, all underlyings
        (underlying-major)."""
        bars = torch.arange(self.first_bar, self.split_end, device=self.device)
        return (
            torch.arange(self.n_symbols, device=self.device).unsqueeze(-1) * self.n_bars + bars
        ).reshape(-1)
