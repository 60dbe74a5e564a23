import numpy as np

from clstm_ppo.data import turbulence


def reference_turbulence(y: np.ndarray, lookback: int) -> np.ndarray:
    """FinRL's definition, one bar at a time with numpy's own cov and pinv."""
    y = y.reshape(len(y), -1)
    out = np.full(len(y), np.nan)
    for t in range(lookback, len(y)):
        hist = y[t - lookback:t]
        if not np.isfinite(hist).all() or not np.isfinite(y[t]).all():
            continue
        mu = hist.mean(axis=0)
        sigma = np.atleast_2d(np.cov(hist, rowvar=False, ddof=1))
        dev = y[t] - mu
        out[t] = dev @ np.linalg.pinv(sigma) @ dev
    return out


def test_three_underlyings_match_reference_including_singular_covariance():
    rng = np.random.default_rng(7)
    n, lookback = 120, 20
    a = rng.normal(0, 0.01, n)
    b = rng.normal(0, 0.02, n)
    y = np.stack([a, b, a], axis=1)  # the third is a copy of the first: Sigma is singular everywhere
    y[50:80, 1] = 0.0  # a flat stretch: a zero row and column in Sigma for windows inside it
    y[0] = np.nan  # the first bar has no return
    got = turbulence(y, lookback)
    want = reference_turbulence(y, lookback)
    assert np.isnan(got[: lookback + 1]).all()
    np.testing.assert_allclose(got[lookback + 1:], want[lookback + 1:], rtol=1e-7, atol=1e-9)
    # A hand check: with Sigma singular, the copy adds nothing to the distance of the 2-underlying case.
    np.testing.assert_allclose(got[lookback + 1:], turbulence(y[:, :2], lookback)[lookback + 1:], rtol=1e-7)


def test_one_underlying_is_squared_zscore():
    rng = np.random.default_rng(1)
    y = rng.normal(0.001, 0.015, 300)
    lookback = 252
    got = turbulence(y, lookback)
    for t in (252, 270, 299):
        window = y[t - lookback:t]
        z = (y[t] - window.mean()) / window.std(ddof=1)
        assert abs(got[t] - z**2) < 1e-9 * max(1.0, z**2)
    assert np.isnan(got[:lookback]).all()


def test_value_at_t_ignores_later_bars():
    rng = np.random.default_rng(2)
    y = rng.normal(0, 0.01, (200, 2))
    base = turbulence(y, 50)
    y2 = y.copy()
    y2[120:] *= 25.0
    np.testing.assert_array_equal(turbulence(y2, 50)[:120], base[:120])
