"""Financial turbulence (FinRL's definition), vectorised over time.

    d_t = (y_t - mu_t) Sigma_t^+ (y_t - mu_t)^T

with mu_t and Sigma_t the mean and sample covariance (ddof 1) of the
``lookback`` return vectors strictly before t, and ^+ the pseudo-inverse, so a
singular covariance (a flat or duplicated underlying) is still defined. With one
underlying this is the squared z-score of the return against its trailing
window. Rolling sums come from prefix sums, so the value at t reads no bar after t.
"""

from __future__ import annotations

import numpy as np

PINV_RCOND = 1e-10  # singular values below this share of the largest count as zero


def turbulence(returns: np.ndarray, lookback: int = 252) -> np.ndarray:
    """Turbulence per bar for ``returns`` of shape (T,) or (T, K); NaN where the
    history is too short.

    Row t of ``returns`` is the return vector of bar t; a NaN row (e.g. the first
    bar, which has no return) makes every window that holds it NaN.
    """
    y = np.asarray(returns, dtype=np.float64)
    if y.ndim == 1:
        y = y[:, None]
    n_bars, _ = y.shape
    out = np.full(n_bars, np.nan)
    if lookback < 2 or n_bars <= lookback:
        return out
    bad = ~np.isfinite(y).all(axis=1)
    # a NaN would poison every later prefix sum; count it instead
    y0 = np.where(bad[:, None], 0.0, y)

    # leading zero row: the window [t-L, t) sums to P[t] - P[t-L]
    def prefix(x: np.ndarray) -> np.ndarray:
        return np.concatenate([np.zeros((1, *x.shape[1:])), np.cumsum(x, axis=0)])

    first, second, bad_count = (
        prefix(y0),
        prefix(y0[:, :, None] * y0[:, None, :]),
        prefix(bad.astype(np.float64)),
    )
    t = np.arange(lookback, n_bars)
    s1 = first[t] - first[t - lookback]  # (n, K)
    s2 = second[t] - second[t - lookback]  # (n, K, K)
    mean = s1 / lookback
    cov = (s2 - lookback * mean[:, :, None] * mean[:, None, :]) / (lookback - 1)
    cov = 0.5 * (cov + np.swapaxes(cov, 1, 2))  # exact symmetry for the Hermitian pseudo-inverse
    finite = (bad_count[t] == bad_count[t - lookback]) & ~bad[t]
    dev = y0[t] - mean
    inv = np.zeros_like(cov)
    if finite.any():
        inv[finite] = np.linalg.pinv(cov[finite], rcond=PINV_RCOND, hermitian=True)
    d = np.einsum("nk,nkj,nj->n", dev, inv, dev)
    out[t] = np.where(finite, np.maximum(d, 0.0), np.nan)
    return out
