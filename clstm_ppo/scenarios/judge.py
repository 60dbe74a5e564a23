"""TimeGAN's discriminative and predictive scores, as its released code computes them,
and a stricter variant.

Discriminative: a GRU classifier (hidden size dim/2) learns real vs generated windows on a random
80% of each and is scored on the other 20%; the score is |accuracy - 0.5| (0: indistinguishable),
averaged over ``runs``. Predictive: a GRU (hidden size dim/2) learns, on one set of windows, to
predict the next bar's target column from every other column up to now; the score is its mean
absolute error on real windows. The strict variant passes fixed train and test sets (non-overlapping
windows, real test windows from after the generator's training data) and a 2-layer judge.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

BATCH = 128  # the released code's batch size


class _Gru(nn.Module):
    def __init__(self, in_dim: int, hidden: int, layers: int, out_dim: int = 1):
        super().__init__()
        self.gru = nn.GRU(in_dim, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, last = self.gru(x)
        return self.head(last[-1]), self.head(out)


def non_overlapping(x: np.ndarray, seq_len: int) -> np.ndarray:
    """(S, T, F) -> (n, seq_len, F): consecutive windows that share no bar."""
    n = x.shape[1] // seq_len
    return x[:, : n * seq_len].reshape(x.shape[0] * n, seq_len, x.shape[2])


def overlapping(x: np.ndarray, seq_len: int) -> np.ndarray:
    """(S, T, F) -> (n, seq_len, F): a window starting at every bar (the
    released code's windows)."""
    starts = np.arange(x.shape[1] - seq_len + 1)
    idx = starts[:, None] + np.arange(seq_len)
    return x[:, idx].reshape(-1, seq_len, x.shape[2])


def _fit_classifier(
    x: torch.Tensor, y: torch.Tensor, layers: int, iters: int, gen: torch.Generator
) -> _Gru:
    net = _Gru(x.shape[2], max(x.shape[2] // 2, 1), layers)
    opt = torch.optim.Adam(net.parameters())
    for _ in range(iters):
        pick = torch.randint(len(x), (min(BATCH, len(x)),), generator=gen)
        logit, _ = net(x[pick])
        loss = nn.functional.binary_cross_entropy_with_logits(logit[:, 0], y[pick])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return net


def _accuracy(net: _Gru, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        logit, _ = net(x)
    return float(((logit[:, 0] > 0).float() == y).float().mean())


def _labelled(real: np.ndarray, fake: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.from_numpy(np.concatenate([real, fake]).astype(np.float32))
    y = torch.cat([torch.ones(len(real)), torch.zeros(len(fake))])
    return x, y


def discriminative_score(
    real: np.ndarray,
    fake: np.ndarray,
    runs: int = 10,
    iters: int = 2000,
    seed: int = 0,
    layers: int = 1,
) -> float:
    """Released-code protocol: windows (n, L, F) of each, a random 80/20 split of each per run."""
    scores = []
    for run in range(runs):
        gen = torch.Generator().manual_seed(seed + run)
        rng = np.random.default_rng(seed + run)
        parts = []
        for windows in (real, fake):
            order = rng.permutation(len(windows))
            cut = int(0.8 * len(windows))
            parts.append((windows[order[:cut]], windows[order[cut:]]))
        torch.manual_seed(seed + run)  # the judge's initial weights
        net = _fit_classifier(*_labelled(parts[0][0], parts[1][0]), layers, iters, gen)
        scores.append(abs(_accuracy(net, *_labelled(parts[0][1], parts[1][1])) - 0.5))
    return float(np.mean(scores))


def strict_discriminative_score(
    train_real: np.ndarray,
    train_fake: np.ndarray,
    test_real: np.ndarray,
    test_fake: np.ndarray,
    runs: int = 10,
    iters: int = 2000,
    seed: int = 0,
) -> float:
    """Fixed sets: the judge learns on ``train_*`` and is scored on ``test_*`` (real
    windows after the date)."""
    scores = []
    for run in range(runs):
        gen = torch.Generator().manual_seed(seed + run)
        torch.manual_seed(seed + run)
        net = _fit_classifier(*_labelled(train_real, train_fake), 2, iters, gen)
        scores.append(abs(_accuracy(net, *_labelled(test_real, test_fake)) - 0.5))
    return float(np.mean(scores))


def predictive_score(
    train: np.ndarray, test: np.ndarray, target: int, iters: int = 2000, seed: int = 0
) -> float:
    """Fit on ``train`` windows (n, L, F), score the next-bar MAE of column ``target`` on
    ``test`` windows."""
    others = [i for i in range(train.shape[2]) if i != target]

    def split(w: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.from_numpy(w.astype(np.float32))
        return w[:, :-1, others], w[:, 1:, target]

    x, y = split(train)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = _Gru(len(others), max(train.shape[2] // 2, 1), 1)
    opt = torch.optim.Adam(net.parameters())
    for _ in range(iters):
        pick = torch.randint(len(x), (min(BATCH, len(x)),), generator=gen)
        _, pred = net(x[pick])
        loss = (pred[..., 0] - y[pick]).abs().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    tx, ty = split(test)
    with torch.no_grad():
        _, pred = net(tx)
    return float((pred[..., 0] - ty).abs().mean())
