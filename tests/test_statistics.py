"""Run statistics against independent computations: the bootstrap interval as numpy computes it, paired
differences, and the deflated Sharpe ratio's worked example from Bailey and Lopez de Prado (2014)."""
import math

import numpy as np
import pytest

from clstm_lab.studies.across_runs import display, mean_over_underlyings, summary_rows
from clstm_ppo.backtest.statistics import (
    bootstrap_ci,
    clustered_bootstrap_ci,
    deflated_sharpe,
    expected_max_sharpe,
    paired_difference,
    probabilistic_sharpe,
)


def test_the_bootstrap_interval_is_numpy_percentiles_of_resampled_means():
    sample = np.array([0.3, -1.2, 0.8, 1.9, 0.1, -0.4, 1.1, 0.6, 2.2, -0.7])
    rng = np.random.default_rng(7)
    means = np.array([sample[rng.integers(0, 10, 10)].mean() for _ in range(4000)])
    assert bootstrap_ci(sample, resamples=4000, seed=7) == pytest.approx(
        (np.quantile(means, 0.025), np.quantile(means, 0.975)), rel=1e-12)
    assert all(math.isnan(x) for x in bootstrap_ci(np.array([1.0, np.nan])))
    low, high = bootstrap_ci(np.full(8, 0.5))
    assert low == high == 0.5


def test_paired_differences_pair_runs_and_drop_missing_pairs():
    a, b = np.array([1.0, 2.0, np.nan, 4.0]), np.array([0.5, 2.5, 1.0, 3.0])
    out = paired_difference(a, b)
    assert out["pairs"] == 3 and out["mean"] == pytest.approx((0.5 - 0.5 + 1.0) / 3)
    assert out["wins"] == pytest.approx(2 / 3) and out["ci_low"] <= out["mean"] <= out["ci_high"]
    with pytest.raises(ValueError, match="paired samples need the same runs"):
        paired_difference(a, b[:3])


def test_the_fold_clustered_interval_counts_folds_not_identical_seeds():
    # ten seeds of each of three folds that all walk one rule: three observations, not thirty
    folds = np.repeat([0, 1, 2], 10)
    d = np.repeat([-0.6, 0.5, 0.4], 10)
    naive = bootstrap_ci(d)
    low, high = clustered_bootstrap_ci(d, folds)
    # with identical runs in a fold, the two-stage bootstrap is the bootstrap of the three fold means
    rng = np.random.default_rng(0)
    means = np.array([np.array([-0.6, 0.5, 0.4])[rng.integers(0, 3, 3)].mean() for _ in range(20_000)])
    assert (low, high) == pytest.approx((np.quantile(means, 0.025), np.quantile(means, 0.975)), abs=0.03)
    assert low < naive[0] and high > naive[1] and high - low > 2 * (naive[1] - naive[0])
    # one run a fold: the runs themselves are resampled (the plain bootstrap's distribution, another stream)
    x = np.array([0.3, -1.2, 0.8, 1.9, 0.1, -0.4, 1.1, 0.6, 2.2, -0.7])
    assert clustered_bootstrap_ci(x, np.arange(10), resamples=40_000) == pytest.approx(
        bootstrap_ci(x, resamples=40_000), abs=0.05)
    assert all(math.isnan(v) for v in clustered_bootstrap_ci(d[:10], folds[:10]))  # one fold: no interval
    with pytest.raises(ValueError, match="a group per run"):
        clustered_bootstrap_ci(d, folds[:5])
    out = paired_difference(d, np.zeros(30), groups=folds)
    assert out["folds"] == 3 and (out["fold_ci_low"], out["fold_ci_high"]) == (low, high)


def test_the_deflated_sharpe_ratio_reproduces_the_papers_worked_example():
    """The paper's example: 100 trials whose annualised Sharpe ratios vary with variance 1/2, the best at an
    annualised 2.5 over 1,250 daily returns with skew -3 and kurtosis 10: SR_0 = 0.1132 a day, DSR = 0.9004."""
    days = 250
    sr0 = expected_max_sharpe(0.5 / days, 100)  # the variance of daily Sharpe ratios
    assert sr0 == pytest.approx(0.1132, abs=5e-4)
    assert probabilistic_sharpe(2.5 / math.sqrt(days), sr0, 1250, -3.0, 10.0) == pytest.approx(0.9004, abs=2e-3)
    assert expected_max_sharpe(0.5, 1) == 0.0


def test_deflated_sharpe_from_returns_falls_as_more_trials_were_tried():
    rng = np.random.default_rng(0)
    returns = rng.normal(0.001, 0.01, 1000)
    few, many = deflated_sharpe(returns, 2, 0.001), deflated_sharpe(returns, 1000, 0.001)
    assert few["sharpe"] == pytest.approx(returns.mean() / returns.std(ddof=1))
    assert many["benchmark_sharpe"] > few["benchmark_sharpe"] and many["deflated_sharpe"] < few["deflated_sharpe"]


def test_ruin_is_counted_per_account_and_shown_as_a_share_of_runs():
    """A mean Sharpe hides a lost account: each run's ruined flag is the share of its underlyings' accounts
    ruined (evaluate's JSON per underlying), and over runs the share of all accounts; a missing number is NaN."""
    metrics = {"total_return": 0.1, "annual_return": 0.05, "sharpe_excess": 0.4, "sharpe": 0.5,
               "max_drawdown": 0.2, "profit_per_trade": None, "trades": 0}
    one = mean_over_underlyings({"A": {**metrics, "min_equity": 0.9, "ruined": False, "costs": 1500.0},
                                 "B": {**metrics, "min_equity": 0.3, "ruined": True, "costs": 2500.0}})
    assert one["ruined"] == 0.5 and one["min_equity"] == pytest.approx(0.6) and one["costs"] == 2000.0
    assert math.isnan(one["profit_per_trade"])  # no underlying closed a trade
    old = mean_over_underlyings({"A": metrics})  # a report from before ruin was recorded
    assert math.isnan(old["ruined"]) and math.isnan(old["min_equity"])
    runs = [one, {**one, "ruined": 0.0}, {**one, "ruined": 1.0}, {**one, "ruined": 0.0}]
    row = summary_rows({"agent": runs})[0]
    assert row["ruined"] == pytest.approx(np.mean([0.5, 0.0, 1.0, 0.0]))
    assert display([row])[0]["ruined"] == "37.5%" and display([row])[0]["min_equity"] == "60.00% +- 0.00"
    assert display([row])[0]["costs"] == "$2,000 +- 0"  # dollars paid in fees, spreads and slippage
