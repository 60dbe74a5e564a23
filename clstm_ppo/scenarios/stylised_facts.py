"""Quant GANs' stylised-fact scores (Wiese et al., 2020) on log returns, in numpy.

Real data come as one or more long series (S, T); generated data as paths (N, L). A curve of a set
of series is the mean of each series' own curve, so a long real series and many short paths are
compared like for like.
"""

from __future__ import annotations

from typing import Any

import numpy as np

EMD_LAGS = (1, 5, 20, 100)
MAX_LAG = 100
LIKE_FOR_LIKE_PATHS = 200


def _rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x[None, :] if x.ndim == 1 else x


def acf(x: np.ndarray, max_lag: int) -> np.ndarray:
    """Autocorrelation at lags 1..max_lag of each row of ``x`` (rows, T), averaged over rows; each
    row is centred by its own mean and divided by its own variance (the usual biased estimator)."""
    x = _rows(x)
    dev = x - x.mean(axis=1, keepdims=True)
    var = (dev * dev).sum(axis=1)
    out = np.stack(
        [(dev[:, :-k] * dev[:, k:]).sum(axis=1) / var for k in range(1, max_lag + 1)], axis=1
    )
    return out.mean(axis=0)


def leverage(x: np.ndarray, max_lag: int) -> np.ndarray:
    """corr(r_t, r_{t+tau}^2) for tau = 1..max_lag, the Pearson correlation within each row,
    averaged over rows."""
    x = _rows(x)
    out = np.empty((x.shape[0], max_lag))
    for k in range(1, max_lag + 1):
        a, b = x[:, :-k], x[:, k:] ** 2
        a, b = a - a.mean(axis=1, keepdims=True), b - b.mean(axis=1, keepdims=True)
        out[:, k - 1] = (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    return out.mean(axis=0)


def acf_scores(real: np.ndarray, fake: np.ndarray, max_lag: int = MAX_LAG) -> dict[str, float]:
    """L2 norm of the difference of the ACF curves over lags 1..max_lag, for r, |r| and r^2."""
    real, fake = _rows(real), _rows(fake)
    out = {}
    for name, f in (("r", lambda v: v), ("abs", np.abs), ("sq", np.square)):
        out[name] = float(np.linalg.norm(acf(f(real), max_lag) - acf(f(fake), max_lag)))
    return out


def leverage_score(real: np.ndarray, fake: np.ndarray, max_lag: int = MAX_LAG) -> float:
    return float(np.linalg.norm(leverage(real, max_lag) - leverage(fake, max_lag)))


def wasserstein1(u: np.ndarray, v: np.ndarray) -> float:
    """Wasserstein-1 distance of two empirical distributions: the area between their CDFs."""
    u, v = np.sort(np.ravel(u)), np.sort(np.ravel(v))
    grid = np.sort(np.concatenate([u, v]))
    widths = np.diff(grid)
    cdf_u = np.searchsorted(u, grid[:-1], side="right") / u.size
    cdf_v = np.searchsorted(v, grid[:-1], side="right") / v.size
    return float(np.sum(np.abs(cdf_u - cdf_v) * widths))


def horizon_returns(x: np.ndarray, lag: int) -> np.ndarray:
    """Every (overlapping) ``lag``-bar log return inside each row: sums of ``lag``
    consecutive one-bar returns."""
    x = _rows(x)
    c = np.concatenate([np.zeros((x.shape[0], 1)), np.cumsum(x, axis=1)], axis=1)
    return (c[:, lag:] - c[:, :-lag]).ravel()


def emd_scores(
    real: np.ndarray, fake: np.ndarray, lags: tuple[int, ...] = EMD_LAGS
) -> dict[str, float]:
    """EMD(t) by lag t (as a string key, for JSON); a lag longer than a path is skipped."""
    real, fake = _rows(real), _rows(fake)
    return {
        str(t): wasserstein1(horizon_returns(real, t), horizon_returns(fake, t))
        for t in lags
        if t < min(real.shape[1], fake.shape[1])
    }


def skew(x: np.ndarray) -> float:
    """Sample skewness of every value pooled (biased, as scipy.stats.skew's default)."""
    x = np.ravel(np.asarray(x, dtype=np.float64))
    d = x - x.mean()
    return float(np.mean(d**3) / np.mean(d**2) ** 1.5)


def excess_kurtosis(x: np.ndarray) -> float:
    """Sample excess kurtosis of every value pooled (biased, Fisher's: a normal has 0)."""
    x = np.ravel(np.asarray(x, dtype=np.float64))
    d = x - x.mean()
    return float(np.mean(d**4) / np.mean(d**2) ** 2 - 3.0)


def per_row_kurtosis(x: np.ndarray) -> np.ndarray:
    """Each row's (series' or path's) own excess kurtosis."""
    return np.array([excess_kurtosis(r) for r in _rows(x)])


def stylised_facts(real: np.ndarray, fake: np.ndarray, max_lag: int = MAX_LAG) -> dict[str, object]:
    """The JSON block of one model against the real returns: emd, acf_score,
    leverage_score, kurtosis, skew."""
    # a correlation needs at least two pairs per row: lags stop two bars short of the shortest row
    lag = min(max_lag, _rows(fake).shape[1] - 2, _rows(real).shape[1] - 2)
    return {
        "emd": emd_scores(real, fake),
        "acf_score": acf_scores(real, fake, lag),
        "leverage_score": leverage_score(real, fake, lag),
        "kurtosis": excess_kurtosis(fake),
        "skew": skew(fake),
    }


def like_for_like(
    model: Any, real_ret: np.ndarray, ret_col: int, seed: int, paths: int = LIKE_FOR_LIKE_PATHS
) -> dict[str, Any]:
    """The stylised facts of generated paths as long as the held-out series, and the tail goal's
    measure: each path's own excess kurtosis. The held-out kurtosis is one history's; 1,000 short
    paths pooled mix every volatility path the model can take, which puts more weight in the tails
    than any one history has, and a short path's own kurtosis is biased towards 0, so only a path of
    the held-out length compares like with like (docs/SCENARIOS.md)."""
    real_ret = np.asarray(real_ret, dtype=np.float64).reshape(-1, np.shape(real_ret)[-1])
    fake = model.sample_features(paths, real_ret.shape[-1], None, seed)[..., ret_col]
    per_path = per_row_kurtosis(fake)
    return {
        **stylised_facts(real_ret, fake),
        "paths": paths,
        "length": int(real_ret.shape[-1]),
        "kurtosis_per_path_median": float(np.median(per_path)),
        "held_out_kurtosis_percentile": float(np.mean(per_path < held_out_kurtosis(real_ret))),
    }


def held_out_kurtosis(real_ret: np.ndarray) -> float:
    """The tail goal's reference: the median of each real series' own excess kurtosis (one
    series: its own)."""
    return float(np.median(per_row_kurtosis(real_ret)))
