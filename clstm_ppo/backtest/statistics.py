"""Statistics that separate skill from luck across runs (docs/BACKTEST.md): bootstrap confidence intervals over
seeds x folds, paired differences, and the deflated Sharpe ratio of the best of many configurations (Bailey and
Lopez de Prado, "The Deflated Sharpe Ratio", Journal of Portfolio Management, 2014).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

EULER_GAMMA = 0.5772156649015329


def bootstrap_ci(sample: np.ndarray, level: float = 0.95, resamples: int = 10_000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``sample`` (runs, e.g. seeds x folds); (nan, nan) for fewer
    than two finite values."""
    x = np.asarray(sample, dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))


def paired_difference(a: np.ndarray, b: np.ndarray, level: float = 0.95, seed: int = 0) -> dict[str, float]:
    """Mean of a - b over runs paired by (seed, fold), with its bootstrap interval and the share of runs where a
    beats b; pairs where either is missing are left out."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired samples need the same runs: {a.shape} vs {b.shape}")
    d = a - b
    d = d[np.isfinite(d)]
    low, high = bootstrap_ci(d, level, seed=seed)
    return {"mean": float(d.mean()) if len(d) else math.nan, "ci_low": low, "ci_high": high,
            "wins": float((d > 0).mean()) if len(d) else math.nan, "pairs": float(len(d))}


def expected_max_sharpe(sharpe_variance: float, trials: int) -> float:
    """The expected largest of ``trials`` Sharpe ratios whose true value is 0 and whose estimates vary with
    ``sharpe_variance`` across trials (the paper's SR_0; in the units of that variance's Sharpe ratios)."""
    if trials < 2:
        return 0.0
    z = stats.norm.ppf
    return math.sqrt(sharpe_variance) * ((1 - EULER_GAMMA) * z(1 - 1 / trials)
                                         + EULER_GAMMA * z(1 - 1 / (trials * math.e)))


def probabilistic_sharpe(sharpe: float, benchmark: float, observations: int, skew: float, kurtosis: float) -> float:
    """P(true Sharpe > ``benchmark``) given an estimate ``sharpe`` from ``observations`` returns of this ``skew``
    and (non-excess) ``kurtosis``; Sharpe ratios per observation, not annualised."""
    spread = 1.0 - skew * sharpe + (kurtosis - 1.0) / 4.0 * sharpe ** 2
    return float(stats.norm.cdf((sharpe - benchmark) * math.sqrt(observations - 1) / math.sqrt(spread)))


def deflated_sharpe(returns: np.ndarray, trials: int, sharpe_variance: float) -> dict[str, float]:
    """The deflated Sharpe ratio of the best of ``trials`` configurations, from its per-period ``returns``:
    the probability that its true Sharpe beats what the best of that many skill-less trials would show.
    ``sharpe_variance`` is the variance of the per-period Sharpe ratios across the trials."""
    r = np.asarray(returns, dtype=np.float64)
    r = r[np.isfinite(r)]
    sd = r.std(ddof=1)
    sharpe = float(r.mean() / sd) if sd > 0 else 0.0
    skew, kurtosis = float(stats.skew(r)), float(stats.kurtosis(r, fisher=False))
    benchmark = expected_max_sharpe(sharpe_variance, trials)
    return {"sharpe": sharpe, "benchmark_sharpe": benchmark, "trials": float(trials),
            "deflated_sharpe": probabilistic_sharpe(sharpe, benchmark, len(r), skew, kurtosis)}
