"""The report's numbers against independent computations on hand-made series."""
import numpy as np
import pytest
import torch
from scipy import stats

from clstm_ppo.scenarios.baselines import Bootstrap, GarchT
from clstm_ppo.scenarios.judge import discriminative_score, non_overlapping, overlapping, predictive_score
from clstm_ppo.scenarios.regime_labels import REGIMES, RegimeRule, trailing
from clstm_ppo.scenarios.stylised_facts import (
    acf,
    acf_scores,
    emd_scores,
    excess_kurtosis,
    held_out_kurtosis,
    horizon_returns,
    leverage,
    leverage_score,
    like_for_like,
    skew,
    stylised_facts,
    wasserstein1,
)


def _numpy_acf(x, lag):
    """Textbook estimator, one lag at a time with np.dot: the independent check of metrics.acf."""
    d = x - x.mean()
    return np.array([np.dot(d[:-k], d[k:]) / np.dot(d, d) for k in range(1, lag + 1)])


def test_acf_matches_numpy_and_a_series_scores_zero_against_itself():
    rng = np.random.default_rng(0)
    x = rng.standard_t(4, 500) * 0.01
    np.testing.assert_allclose(acf(x, 20), _numpy_acf(x, 20), rtol=1e-12)
    paths = rng.normal(size=(7, 60))
    np.testing.assert_allclose(acf(paths, 10), np.mean([_numpy_acf(p, 10) for p in paths], axis=0), rtol=1e-12)
    assert acf_scores(x, x, 50) == {"r": 0.0, "abs": 0.0, "sq": 0.0}
    assert leverage_score(x, x, 50) == 0.0
    # a hand value: an alternating series has ACF -1 at lag 1 ... up to the finite-sample factor (n - k) / n
    alt = np.tile([1.0, -1.0], 50)
    assert acf(alt, 1)[0] == pytest.approx(-99 / 100)
    other = np.tile([1.0, -2.0, 0.5], 40)
    expected = np.linalg.norm(_numpy_acf(np.abs(x), 5) - _numpy_acf(np.abs(other), 5))
    assert acf_scores(x, other, 5)["abs"] == pytest.approx(expected, rel=1e-12)


def test_leverage_known_case_and_numpy():
    # r_{t+1}^2 = 1 - r_t exactly for 0, 1, 0, 1, ...: corr(r_t, r_{t+1}^2) = -1 and corr(r_t, r_{t+2}^2) = +1
    x = np.tile([0.0, 1.0], 20)
    np.testing.assert_allclose(leverage(x, 2), [-1.0, 1.0], atol=1e-12)
    rng = np.random.default_rng(1)
    y = rng.normal(size=300)
    expected = [np.corrcoef(y[:-k], y[k:] ** 2)[0, 1] for k in range(1, 6)]
    np.testing.assert_allclose(leverage(y, 5), expected, rtol=1e-10)
    assert leverage_score(y, x, 2) == pytest.approx(np.linalg.norm(np.array(expected[:2]) - [-1.0, 1.0]))


def test_wasserstein_against_scipy_and_hand_values():
    assert wasserstein1([0.0, 0.0], [1.0, 1.0]) == pytest.approx(1.0)
    assert wasserstein1([0.0, 1.0, 2.0], [0.5, 1.5, 2.5]) == pytest.approx(0.5)  # a shift moves every point
    rng = np.random.default_rng(2)
    u, v = rng.normal(size=400), rng.standard_t(3, size=333) * 0.7 + 0.1
    assert wasserstein1(u, v) == pytest.approx(stats.wasserstein_distance(u, v), rel=1e-10)


def test_horizon_returns_and_emd_by_lag():
    x = np.arange(1.0, 11.0)[None, :]
    np.testing.assert_allclose(horizon_returns(x, 3), [x[0, i:i + 3].sum() for i in range(8)])
    rng = np.random.default_rng(3)
    real, fake = rng.normal(size=(1, 300)), rng.normal(size=(5, 120)) * 1.5
    scores = emd_scores(real, fake)
    assert set(scores) == {"1", "5", "20", "100"}
    manual = stats.wasserstein_distance(
        [real[0, i:i + 5].sum() for i in range(296)], [p[i:i + 5].sum() for p in fake for i in range(116)])
    assert scores["5"] == pytest.approx(manual, rel=1e-10)
    assert set(emd_scores(real, fake[:, :50])) == {"1", "5", "20"}  # a lag longer than a path is skipped


def test_skew_and_kurtosis_match_scipy():
    rng = np.random.default_rng(4)
    x = rng.lognormal(size=1000)
    assert skew(x) == pytest.approx(stats.skew(x), rel=1e-10)
    assert excess_kurtosis(x) == pytest.approx(stats.kurtosis(x), rel=1e-10)
    facts = stylised_facts(x[None, :500], x[500:].reshape(5, 100))
    assert set(facts) == {"emd", "acf_score", "leverage_score", "kurtosis", "skew"}


class _Source:
    """Paths of (N, L, 1) returns from ``draw(rng, n, length)``, as a generator's sample_features gives."""

    def __init__(self, draw):
        self.draw = draw

    def sample_features(self, paths, length, regime=None, seed=0, start="end"):
        return self.draw(np.random.default_rng(seed), paths, length)[..., None]


def test_the_tail_measure_compares_histories_of_the_held_out_length():
    rng = np.random.default_rng(6)
    held = rng.standard_t(4, size=(1, 1500)) * 0.01
    k = stats.kurtosis(held[0])
    # a source of reshuffled held-out years: each of its histories has the held-out kurtosis exactly
    same = like_for_like(_Source(lambda g, n, m: np.stack([g.permutation(held[0])[:m] for _ in range(n)])), held, 0,
                         seed=1, paths=20)
    assert (same["length"], same["paths"]) == (1500, 20)
    assert same["kurtosis_per_path_median"] == pytest.approx(k, rel=1e-9)
    # volatility that differs between paths: the pooled kurtosis grows, each history's does not
    mixed = _Source(lambda g, n, m: g.normal(size=(n, m)) * np.exp(g.normal(size=(n, 1))))
    out = like_for_like(mixed, held, 0, seed=2, paths=200)
    pooled = excess_kurtosis(mixed.sample_features(200, 1500, seed=2))
    assert pooled > 2.0 and abs(out["kurtosis_per_path_median"]) < 0.2
    assert out["held_out_kurtosis_percentile"] == 1.0  # every Gaussian history is thinner-tailed than the held-out
    # several real series (the Dow stocks): the reference is the median of each one's own kurtosis
    series = np.stack([held[0], held[0] * 2, rng.normal(size=1500)])
    assert held_out_kurtosis(series) == pytest.approx(k, rel=1e-9)


def test_clustering_is_compared_on_histories_of_the_held_out_length():
    """The acf_abs goal's reason (docs/SCENARIOS.md): the ACF of |r| up to lag 100 of one GARCH(1,1) process, measured
    on 252-bar paths, is a fraction of the same process's on paths of the held-out length (1,510 bars)."""
    rng = np.random.default_rng(0)
    n, var = 200 * 1510, 1.0
    r, z = np.empty(n), rng.standard_normal(n)
    for t in range(n):  # persistence 0.99, as the S&P 500's training years have
        r[t] = np.sqrt(var) * z[t]
        var = 0.01 + 0.06 * r[t] ** 2 + 0.93 * var
    short, long = acf(np.abs(r[:1198 * 252].reshape(-1, 252)), 100), acf(np.abs(r.reshape(200, 1510)), 100)
    assert short.mean() < 0.3 * long.mean()
    assert (short < long).all()  # at every lag the shorter path's estimate is the lower one


def test_windows_and_judges():
    x = np.arange(2 * 10 * 3, dtype=float).reshape(2, 10, 3)
    assert non_overlapping(x, 4).shape == (4, 4, 3)  # 2 windows per underlying; bars 8, 9 are left over
    np.testing.assert_array_equal(non_overlapping(x, 4)[1], x[0, 4:8])
    assert overlapping(x, 4).shape == (14, 4, 3)
    np.testing.assert_array_equal(overlapping(x, 4)[8], x[1, 1:5])
    torch.manual_seed(0)
    rng = np.random.default_rng(5)
    real = rng.normal(size=(120, 8, 2)).astype(np.float32)
    # a judge tells windows 5 standard deviations apart every time; the score is |accuracy - 0.5|
    assert discriminative_score(real, real + 5.0, runs=2, iters=300) == pytest.approx(0.5, abs=0.05)
    mae = predictive_score(real, real, target=1, iters=20)
    assert 0.0 < mae < 3.0


def test_regime_labels_from_trailing_return_and_vol():
    rng = np.random.default_rng(6)
    train = rng.normal(0.0003, 0.01, size=(1, 2000))
    rule = RegimeRule.fit(train, window=20)
    assert rule.crash_return < rule.bear_return < rule.bull_return
    total, vol = trailing(train, 20)
    np.testing.assert_allclose(total[0, 19], train[0, :20].sum())
    np.testing.assert_allclose(vol[0, 25], train[0, 6:26].std())
    crash = np.full((1, 40), -0.02)
    rally = np.full((1, 40), 0.01)
    assert (rule.label(crash) == REGIMES.index("crash")).all()
    assert (rule.label(rally) == REGIMES.index("bull")).all()
    assert (rule.label(np.zeros((1, 40))) == REGIMES.index("sideways")).all()


def test_baselines_sample_training_like_bars():
    rng = np.random.default_rng(7)
    n = 1500
    vol = np.empty(n)
    r = np.empty(n)
    vol[0], r[0] = 0.01, 0.0
    for t in range(1, n):  # a GARCH-like series, so the fit has something to find
        vol[t] = np.sqrt(1e-6 + 0.1 * r[t - 1] ** 2 + 0.85 * vol[t - 1] ** 2)
        r[t] = vol[t] * rng.standard_t(6) * np.sqrt(4 / 6)
    other = np.abs(r)[:, None] + rng.normal(0, 1e-4, (n, 1))
    raw = np.concatenate([other, r[:, None]], axis=1)[None]  # columns: (a wick-like column, ret)
    garch = GarchT.fit(raw, ret_col=1)
    assert 0 < garch.alpha < 1 and 0 < garch.beta < 1 and garch.nu > 2
    sim = garch.sample_features(50, 100, seed=0)
    assert sim.shape == (50, 100, 2)
    assert np.isin(sim[..., 0], raw[0, :, 0]).all()  # the other columns are real training rows
    boot = Bootstrap.fit(raw, ret_col=1).sample_features(30, 80, seed=1)
    rows = {tuple(row) for row in raw[0]}
    assert all(tuple(row) in rows for row in boot.reshape(-1, 2))
    np.testing.assert_array_equal(Bootstrap.fit(raw, 1).sample_features(3, 10, seed=9),
                                  Bootstrap.fit(raw, 1).sample_features(3, 10, seed=9))
