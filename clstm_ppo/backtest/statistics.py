"""Statistics that separate skill from luck across runs (docs/BACKTEST.md): bootstrap confidence
intervals over seeds x folds, paired differences, and the deflated Sharpe ratio of the best of
many configurations (Bailey and Lopez de Prado, "The Deflated Sharpe Ratio", Journal of
Portfolio Management, 2014).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

EULER_GAMMA = 0.5772156649015329


def bootstrap_ci(
    sample: np.ndarray, level: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``sample`` (runs, e.g. seeds x folds); (nan,
    nan) for fewer than two finite values."""
    x = np.asarray(sample, dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))


def clustered_bootstrap_ci(
    sample: np.ndarray,
    groups: np.ndarray,
    level: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile interval of the mean of ``sample`` by a two-stage bootstrap: draw the groups
    (folds) with replacement, then each drawn group's runs (seeds) with replacement, and take the
    mean of every drawn run.

    Seeds of one fold share its test years, and runs that walk one identical rule are one
    observation, not ten: resampling runs as if independent then gives an interval as narrow as the
    seed count allows. With few groups (3 folds) this interval is wide, which is what three test
    periods can show. (nan, nan) for fewer than two groups with finite values."""
    x, g = np.asarray(sample, dtype=np.float64), np.asarray(groups)
    if x.shape != g.shape:
        raise ValueError(f"a group per run: {x.shape} runs vs {g.shape} groups")
    keep = np.isfinite(x)
    members = [x[keep & (g == k)] for k in dict.fromkeys(g[keep].tolist())]
    if len(members) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    sums = np.stack(
        [m[rng.integers(0, len(m), size=(resamples, len(m)))].sum(axis=1) for m in members]
    )
    sizes = np.array([len(m) for m in members], dtype=np.float64)
    picks = rng.integers(0, len(members), size=(resamples, len(members)))
    totals = np.take_along_axis(sums.T, picks, axis=1).sum(axis=1)
    means = totals / sizes[picks].sum(axis=1)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))


def paired_difference(
    a: np.ndarray,
    b: np.ndarray,
    level: float = 0.95,
    seed: int = 0,
    groups: np.ndarray | None = None,
) -> dict[str, float]:
    """Mean of a - b over runs paired by (seed, fold), with its bootstrap interval and the share of
    runs where a beats b; pairs where either is missing are left out. With ``groups`` (each run's
    fold) also the two-stage interval of ``clustered_bootstrap_ci`` (``fold_ci_low``,
    ``fold_ci_high``) and the number of groups."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired samples need the same runs: {a.shape} vs {b.shape}")
    d = a - b
    keep = np.isfinite(d)
    low, high = bootstrap_ci(d[keep], level, seed=seed)
    out = {
        "mean": float(d[keep].mean()) if keep.any() else math.nan,
        "ci_low": low,
        "ci_high": high,
        "wins": float((d[keep] > 0).mean()) if keep.any() else math.nan,
        "pairs": float(keep.sum()),
    }
    if groups is not None:
        g = np.asarray(groups)
        f_low, f_high = clustered_bootstrap_ci(d[keep], g[keep], level, seed=seed)
        out.update(
            {
                "folds": float(len(set(g[keep].tolist()))),
                "fold_ci_low": f_low,
                "fold_ci_high": f_high,
            }
        )
    return out


def expected_max_sharpe(sharpe_variance: float, trials: int) -> float:
    """The expected largest of ``trials`` Sharpe ratios whose true value is 0 and whose estimates
    vary with ``sharpe_variance`` across trials (the paper's SR_0; in the units of that
    variance's Sharpe ratios)."""
    if trials < 2:
        return 0.0
    z = stats.norm.ppf
    return math.sqrt(sharpe_variance) * (
        (1 - EULER_GAMMA) * z(1 - 1 / trials) + EULER_GAMMA * z(1 - 1 / (trials * math.e))
    )


def probabilistic_sharpe(
    sharpe: float, benchmark: float, observations: int, skew: float, kurtosis: float
) -> float:
    """P(true Sharpe > ``benchmark``) given an estimate ``sharpe`` from ``observations`` returns of
    this ``skew`` and (non-excess) ``kurtosis``; Sharpe ratios per observation, not annualised."""
    spread = 1.0 - skew * sharpe + (kurtosis - 1.0) / 4.0 * sharpe**2
    return float(
        stats.norm.cdf((sharpe - benchmark) * math.sqrt(observations - 1) / math.sqrt(spread))
    )


def deflated_sharpe(returns: np.ndarray, trials: int, sharpe_variance: float) -> dict[str, float]:
    """The deflated Sharpe ratio of the best of ``trials`` configurations, from its per-period
    ``returns``: the probability that its true Sharpe beats what the best of that many
    skill-less trials would show. ``sharpe_variance`` is the variance of the per-period Sharpe
    ratios across the trials."""
    r = np.asarray(returns, dtype=np.float64)
    r = r[np.isfinite(r)]
    sd = r.std(ddof=1)
    sharpe = float(r.mean() / sd) if sd > 0 else 0.0
    skew, kurtosis = float(stats.skew(r)), float(stats.kurtosis(r, fisher=False))
    benchmark = expected_max_sharpe(sharpe_variance, trials)
    return {
        "sharpe": sharpe,
        "benchmark_sharpe": benchmark,
        "trials": float(trials),
        "deflated_sharpe": probabilistic_sharpe(sharpe, benchmark, len(r), skew, kurtosis),
    }
