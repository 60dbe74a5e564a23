"""Few-shot tasks: one task is (underlying, date window), labelled BUY / HOLD / SELL from
its own support set.

Layout of one task's window of ``n_support + n_query + 2 * horizon`` bars, starting at bar ``a``::

    support bars  a .. a+Ns-1           labels read closes up to a+Ns-1+k
    gap           k bars                 so no support label reads a query bar's close
    query bars    a+Ns+k .. a+Ns+k+Nq-1  labels read closes up to the window's last bar
    gap           k bars

The label of bar t is the k-bar log return ``log(close[t+k] / close[t])`` against a band (lo, hi) =
the 1/3 and 2/3 quantiles of the *support* returns: below lo SELL, above hi BUY, else HOLD. The
support set is so balanced by construction (5/5/5 for 15 distinct returns); the query set is
labelled with the support's band, so its classes follow whatever the market did next, and a constant
guess earns chance, not more. Inputs are the normalised feature windows ending at each bar (TW bars
back, which may reach before the task's window: past).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.errors import DataError
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.data.windows import MarketWindows

CLASSES = ("SELL", "HOLD", "BUY")


def band(support_returns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) per task from its support returns (..., Ns) alone: their 1/3 and 2/3 quantiles."""
    return (
        np.quantile(support_returns, 1 / 3, axis=-1, keepdims=True),
        np.quantile(support_returns, 2 / 3, axis=-1, keepdims=True),
    )


def labels(returns: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """0 SELL (below lo), 1 HOLD, 2 BUY (above hi)."""
    return np.where(returns < lo, 0, np.where(returns > hi, 2, 1)).astype(np.int64)


@dataclass
class Episodes:
    """E tasks: flat feature rows (``sym * T + t``) and labels of their support (E, Ns) and
    query (E, Nq) bars."""

    support_rows: Tensor
    support_y: Tensor
    query_rows: Tensor
    query_y: Tensor
    symbol: np.ndarray  # (E,) underlying index
    start: np.ndarray  # (E,) the window's first bar
    # (E,) one past the window's last bar (the last close any label reads is end - 1)
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.symbol)


class FewShotData:
    """One data source's features (normalised on the meta-training underlyings' training bars only),
    its k-bar forward returns and windows, and the bar ranges tasks may come from."""

    def __init__(self, data: MarketData, train_symbols: list[int], horizon: int):
        self.data, self.horizon = data, horizon
        train_start, train_end = data.splits["train"]
        # Held-out underlyings must not shape the inputs: the statistics come
        # from the meta-training ones alone.
        normalizer = Normalizer.fit(
            data.raw_features[train_symbols, train_start:train_end], data.feature_names
        )
        normalised = dataclasses.replace(data, features=normalizer.apply(data.raw_features))
        self.windows = MarketWindows(normalised, "train")
        close = data.bars["close"]
        self.n_bars = close.shape[1]
        fwd = np.full(close.shape, np.nan)
        fwd[:, :-horizon] = np.log(close[:, horizon:] / close[:, :-horizon])
        self.forward_returns = fwd  # (S, T): bar t's label reads close[t + horizon]

    def region(self, name: str) -> tuple[int, int]:
        """[first, end) bars a task's window may cover: ``train`` the training split
        (meta-training), ``later`` validation and test (meta-testing on later years than any
        meta-training bar)."""
        start, end = self.data.splits["train"]
        if name == "later":
            start, end = self.data.splits["validation"][0], self.n_bars
        return max(start, self.data.window - 1), end

    def gather(self, rows: Tensor) -> Tensor:
        return self.windows.gather(rows)


def sample_episodes(
    fs: FewShotData,
    symbols: list[int],
    region: tuple[int, int],
    n: int,
    shots: int,
    n_query: int,
    rng: np.random.Generator,
) -> Episodes:
    """``n`` tasks on ``symbols``, windows inside ``region``; 3-way, ``shots``
    support bars per class."""
    n_support, k = 3 * shots, fs.horizon
    span = n_support + n_query + 2 * k
    first, end = region
    if end - first < span:
        raise DataError(
            f"a task needs {span} bars (3 x shots + query + 2 x horizon); the region of its "
            f"windows has {end - first}: lower --shots, --query or --horizon"
        )
    sym = rng.choice(np.asarray(symbols), size=n)
    start = rng.integers(first, end - span + 1, size=n)
    s_bars = start[:, None] + np.arange(n_support)
    q_bars = start[:, None] + n_support + k + np.arange(n_query)
    s_ret, q_ret = (
        fs.forward_returns[sym[:, None], s_bars],
        fs.forward_returns[sym[:, None], q_bars],
    )
    lo, hi = band(s_ret)
    row = lambda bars: torch.as_tensor(sym[:, None] * fs.n_bars + bars)  # noqa: E731
    return Episodes(
        row(s_bars),
        torch.as_tensor(labels(s_ret, lo, hi)),
        row(q_bars),
        torch.as_tensor(labels(q_ret, lo, hi)),
        sym,
        start,
        start + span,
    )


def folds(n_symbols: int, k: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """k-fold over underlyings: (meta-train, held-out) index lists, each
    underlying held out once."""
    order = np.random.default_rng(seed).permutation(n_symbols)
    parts = np.array_split(order, k)
    return [
        (
            sorted(int(s) for s in np.concatenate(parts[:i] + parts[i + 1 :])),
            sorted(int(s) for s in part),
        )
        for i, part in enumerate(parts)
    ]
