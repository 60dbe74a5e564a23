"""The Sharpe-difference test (docs/BACKTEST.md, "Is the difference real?"): its standard error against the textbook
formula, its coverage on series with a known difference, and the command's refusals."""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from clstm_lab.studies.sharpe_coverage import coverage, paired_returns
from clstm_ppo.backtest.sharpe_difference import hac_standard_error, sharpe_difference

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "studies" / "sharpe_test.py"


def memmel_se(sr_a: float, sr_b: float, rho: float, days: int) -> float:
    """Jobson and Korkie's standard error of a per-bar Sharpe difference, Memmel's (2003) corrected form, for iid
    normal returns."""
    return math.sqrt((2 - 2 * rho + 0.5 * (sr_a**2 + sr_b**2 - 2 * sr_a * sr_b * rho**2)) / days)


def test_the_standard_error_of_iid_normal_returns_is_memmels():
    rng = np.random.default_rng(0)
    days, rho, sr_a, sr_b = 200_000, 0.9, 0.08, 0.05
    z = rng.standard_normal((days, 2))
    z[:, 1] = rho * z[:, 0] + math.sqrt(1 - rho**2) * z[:, 1]
    diff, se = hac_standard_error(sr_a + z[:, 0], sr_b + z[:, 1], lags=0)
    assert se == pytest.approx(memmel_se(sr_a, sr_b, rho, days), rel=0.02)
    assert diff == pytest.approx(sr_a - sr_b, abs=4 * se)


def test_autocorrelation_widens_the_hac_error_as_the_long_run_variance_says():
    """An MA(1) of weight 0.5 makes the long-run variance of the mean (1 + 0.5)^2 / (1 + 0.25) = 1.8 times the
    variance: with enough lags the error grows by sqrt(1.8); without lags it does not."""
    rng = np.random.default_rng(1)
    days = 100_000
    e = rng.standard_normal((days + 1, 2))
    e[:, 1] = 0.5 * e[:, 0] + math.sqrt(0.75) * e[:, 1]
    x = (e[1:] + 0.5 * e[:-1]) / math.sqrt(1.25)
    _, plain = hac_standard_error(0.05 + x[:, 0], 0.02 + x[:, 1], lags=0)
    _, hac = hac_standard_error(0.05 + x[:, 0], 0.02 + x[:, 1], lags=20)
    assert hac / plain == pytest.approx(math.sqrt(1.8), rel=0.05)


def test_the_simulated_pairs_have_the_sharpe_ratios_and_correlation_they_are_given():
    x = paired_returns(np.random.default_rng(2), 400_000, 0.9, 0.8, 0.5)
    sharpe = x.mean(0) / x.std(0) * math.sqrt(252)
    np.testing.assert_allclose(sharpe, [0.8, 0.5], atol=0.05)
    assert np.corrcoef(x.T)[0, 1] == pytest.approx(0.9, abs=0.01)
    lag1 = np.corrcoef(x[1:, 0], x[:-1, 0])[0, 1]
    assert lag1 == pytest.approx(0.1 / 1.01, abs=0.01)  # the MA(1)'s autocorrelation
    assert np.corrcoef(np.abs(x[1:, 0]), np.abs(x[:-1, 0]))[0, 1] > 0.05  # volatility clusters


def test_coverage_and_size_on_sixteen_fat_tailed_years():
    """A small run of what scripts/studies/sharpe_coverage.py measures over 1,000 simulations a cell (its rows in
    docs/data/statistics): the interval covers a known difference and rejects a true zero about as often as 95%
    says. 120 simulations give a binomial sd of 2 points, so the bounds are 4 sd wide."""
    at_zero = coverage(120, 16, 0.9, 0.0, resamples=199, seed=11)
    at_edge = coverage(120, 16, 0.9, 0.3, resamples=199, seed=12)
    assert 0.87 <= at_zero["coverage"] <= 1.0 and at_zero["rejection"] <= 0.13
    assert 0.87 <= at_edge["coverage"] <= 1.0
    assert at_edge["rejection"] > 0.3  # a 0.3 edge at rho 0.9 over 16 years is found more often than not


def test_a_strategy_against_itself_shifted_by_a_known_edge():
    rng = np.random.default_rng(3)
    x = paired_returns(rng, 16 * 252, 0.95, 1.0, 0.0)
    test = sharpe_difference(x[:, 0], x[:, 1], resamples=999)
    assert test.ci_low < test.difference < test.ci_high
    assert test.edge_ruled_out > test.difference
    assert test.ci_high - test.ci_low == pytest.approx(2 * 1.96 * test.hac_se, rel=0.35)
    assert test.p_value < 0.05  # an edge of 1.0 with rho 0.95 is far beyond the ~0.09 standard error
    assert test.days == 16 * 252 and test.block_length >= 1


def test_a_strategy_against_itself_is_no_difference_with_nothing_to_test():
    """An agent that walks its rule exactly: no resample moves the difference, which is 0 for certain."""
    x = np.random.default_rng(4).normal(0.0004, 0.01, 3 * 252)
    test = sharpe_difference(x, x, resamples=99)
    assert (test.difference, test.ci_low, test.ci_high, test.p_value, test.resamples) == (0.0, 0.0, 0.0, 1.0, 0)
    assert test.sharpe_a == test.sharpe_b == pytest.approx(x.mean() / x.std() * math.sqrt(252))


@pytest.mark.parametrize("a, b, words", [
    (np.zeros(300), np.ones(300) * 0.001, "constant"),
    (np.r_[np.nan, np.random.default_rng(0).normal(size=299)], np.random.default_rng(1).normal(size=300), "NaN"),
    (np.random.default_rng(0).normal(size=200), np.random.default_rng(1).normal(size=200), "less than a year"),
    (np.random.default_rng(0).normal(size=300), np.random.default_rng(1).normal(size=301), "paired"),
])
def test_unusable_series_are_refused(a, b, words):
    with pytest.raises(ValueError, match=words):
        sharpe_difference(a, b)


def returns_file(path: Path, days: pd.DatetimeIndex, **columns) -> Path:
    pd.DataFrame(columns, index=pd.DatetimeIndex(days, name="date")).to_csv(path, date_format="%Y-%m-%d")
    return path


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sharpe")
    days = pd.bdate_range("2003-01-02", periods=3 * 252)
    x = paired_returns(np.random.default_rng(4), len(days), 0.9, 1.0, 0.5)
    tbill = np.full(len(days), 0.0001)
    a = returns_file(folder / "a.csv", days, agent=x[:, 0] + tbill, tbill=tbill)
    b = returns_file(folder / "b.csv", days, best_rule=x[:, 1] + tbill, buy_and_hold=x[:, 0], tbill=tbill)
    return folder, days, x, a, b


def test_the_command_reads_two_returns_files_and_tests_over_the_tbill(two_files):
    _, _, x, a, b = two_files
    done = run(a, b, "--b-column", "best_rule", "--resamples", "499", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    row = got["rows"][0]
    direct = sharpe_difference(x[:, 0], x[:, 1], resamples=499)
    assert row["difference"] == pytest.approx(direct.difference, rel=1e-9)
    assert row["ci_low"] == pytest.approx(direct.ci_low, rel=1e-9) and row["p_value"] == direct.p_value
    assert got["days"] == len(x) and got["a"] == "agent" and got["b"] == "best_rule"


@pytest.mark.parametrize("make, words", [
    (lambda f, d, x: (f / "a.csv", f / "missing.csv"), "not found"),
    (lambda f, d, x: (f / "a.csv", f / "b.csv"), "holds 2 policies"),
    (lambda f, d, x: (f / "a.csv", returns_file(f / "short.csv", d[5:], r=x[5:, 1], tbill=np.zeros(len(d) - 5))),
     "do not line up"),
    (lambda f, d, x: (f / "a.csv", returns_file(f / "notb.csv", d, r=x[:, 1])), "no 'tbill' column"),
    (lambda f, d, x: (f / "a.csv", returns_file(f / "nan.csv", d, r=np.r_[np.nan, x[1:, 1]], tbill=np.zeros(len(d)))),
     "not finite"),
    (lambda f, d, x: (returns_file(f / "few_a.csv", d[:100], r=x[:100, 0], tbill=np.zeros(100)),
                      returns_file(f / "few_b.csv", d[:100], r=x[:100, 1], tbill=np.zeros(100))), "less than a year"),
    (lambda f, d, x: (f / "a.csv", returns_file(f / "flat.csv", d, r=np.full(len(d), 1e-4), tbill=np.zeros(len(d)))),
     "constant"),
])
def test_the_command_refuses_bad_files_in_one_line(two_files, make, words):
    folder, days, x, _, _ = two_files
    a, b = make(folder, days, x)
    done = run(a, b)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
