"""Does the Sharpe-difference test say what it claims? Paired daily returns with a known Sharpe difference,
fat-tailed, autocorrelated and with volatility clustering, as strategies on one market are; the share of 95%
intervals that cover the true difference and, where it is 0, the share of tests that reject (docs/BACKTEST.md,
"Is the difference real?")."""
from __future__ import annotations

import math

import numpy as np
from scipy.signal import lfilter

from clstm_ppo.backtest.sharpe_difference import sharpe_difference

DAYS_PER_YEAR = 252


def paired_returns(rng: np.random.Generator, days: int, rho: float, sharpe_a: float, sharpe_b: float,
                   vol: float = 0.01, df: float = 5.0, ma: float = 0.1, vol_persistence: float = 0.98,
                   vol_of_vol: float = 0.09) -> np.ndarray:
    """(days, 2) daily returns whose annualised Sharpe ratios are exactly ``sharpe_a`` and ``sharpe_b``: Student-t
    shocks (``df``) correlated ``rho``, an MA(1) of weight ``ma`` (autocorrelated returns), scaled by one shared
    log-AR(1) volatility normalised to unit mean square (clustering that hits both; its defaults give the
    log volatility a stationary sd of 0.45, about the S&P 500's), so the unconditional variance
    is ``vol``^2 and the mean ``sharpe / sqrt(252) * vol``."""
    shocks = rng.standard_t(df, size=(days + 1, 2)) / math.sqrt(df / (df - 2.0))  # unit variance
    shocks[:, 1] = rho * shocks[:, 0] + math.sqrt(1.0 - rho**2) * shocks[:, 1]
    sd = vol_of_vol / math.sqrt(1.0 - vol_persistence**2)  # the stationary sd of the log volatility
    start, noise = rng.normal(0.0, sd), rng.normal(0.0, vol_of_vol, days)
    # x_t = persistence x_{t-1} + noise_t from x_0 = start, as a linear filter
    log_vol = np.r_[start, lfilter([1.0], [1.0, -vol_persistence], noise, zi=[vol_persistence * start])[0]]
    scale = np.exp(log_vol - sd**2)  # E[scale^2] = exp(2 sd^2 - 2 sd^2) = 1
    scaled = shocks * scale[:, None]  # still unit variance, mean 0, correlation rho
    moved = (scaled[1:] + ma * scaled[:-1]) / math.sqrt(1.0 + ma**2)
    means = np.array([sharpe_a, sharpe_b]) / math.sqrt(DAYS_PER_YEAR) * vol
    return means + vol * moved


def coverage(simulations: int, years: int, rho: float, difference: float, resamples: int = 999,
             seed: int = 0, base_sharpe: float = 0.5) -> dict[str, float]:
    """Over ``simulations`` paired series of ``years`` with Sharpe ratios base + difference and base: how often
    the 95% interval covers the true difference, the two-sided test rejects at 5%, and the one-sided bound lies
    above the truth; the mean interval width and standard error."""
    rng = np.random.default_rng(seed)
    covered = rejected = bounded = 0
    widths, errors = [], []
    for i in range(simulations):
        x = paired_returns(rng, years * DAYS_PER_YEAR, rho, base_sharpe + difference, base_sharpe)
        test = sharpe_difference(x[:, 0], x[:, 1], resamples=resamples, seed=seed * 100_003 + i)
        covered += test.ci_low <= difference <= test.ci_high
        rejected += test.p_value <= 0.05
        bounded += test.edge_ruled_out >= difference
        widths.append(test.ci_high - test.ci_low)
        errors.append(test.hac_se)
    return {"simulations": simulations, "years": years, "rho": rho, "difference": difference,
            "resamples": resamples, "coverage": covered / simulations, "rejection": rejected / simulations,
            "one_sided_coverage": bounded / simulations, "mean_width": float(np.mean(widths)),
            "mean_hac_se": float(np.mean(errors))}
