"""What the generators learn and how it goes back into bars: the Lambert W transform, the volatility filter, the
coding of its residuals and filtered historical simulation, against independent references on hand-made series."""
import numpy as np
import pytest
import torch
from arch import arch_model
from scipy.optimize import brentq

from clstm_ppo.scenarios.baselines import Fhs
from clstm_ppo.scenarios.coding import ResidualCoder, Transform
from clstm_ppo.scenarios.filtering import BarFilter, Garch
from clstm_ppo.scenarios.lambertw import LambertW, h_delta, w_delta
from clstm_ppo.scenarios.quantile_map import QuantileMap
from clstm_ppo.scenarios.residual_scale import Calibration

NAMES = ("gap", "ret", "up", "down", "dvol", "logiv")


def _garch_series(n=1500, seed=0):
    """Log returns of a GJR-GARCH(1,1) with Student-t shocks, in plain numpy."""
    rng = np.random.default_rng(seed)
    var, r = np.empty(n), np.empty(n)
    var[0], r[0] = 1.0, 0.0
    for t in range(1, n):
        e = r[t - 1] * 100 - 0.03
        var[t] = 0.02 + (0.03 + 0.1 * (e < 0)) * e * e + 0.88 * var[t - 1]
        r[t] = (0.03 + np.sqrt(var[t]) * rng.standard_t(6) * np.sqrt(4 / 6)) / 100
    return r


def _bars(n=1500, seed=0):
    """(1, n, 6) hand-made bar columns: GJR returns, gaps, wicks with zeros, volume changes, a persistent log iv."""
    rng = np.random.default_rng(seed + 1)
    r = _garch_series(n, seed)
    vol = np.abs(r) + 0.004
    gap = np.where(rng.random(n) < 0.3, 0.0, rng.normal(0, 0.002, n))
    up = np.where(rng.random(n) < 0.2, 0.0, vol * rng.exponential(0.3, n))
    down = np.where(rng.random(n) < 0.2, 0.0, vol * rng.exponential(0.3, n))
    dvol = rng.standard_t(4, n) * 0.15
    logiv = np.log(0.2) + np.convolve(rng.normal(0, 0.05, n), np.ones(20) / np.sqrt(20), "same")
    return np.stack([gap, r, up, down, dvol, logiv], axis=-1)[None]


def test_lambert_w_inverts_exactly_and_matches_a_root_finder():
    rng = np.random.default_rng(0)
    y = rng.standard_t(3, 2000) * 0.01 + 0.001  # heavy tails
    lw = LambertW.fit(y)
    assert lw.delta > 0.05
    np.testing.assert_allclose(lw.heavy(lw.gaussianise(y)), y, rtol=1e-12, atol=1e-15)
    u = rng.normal(size=500)
    np.testing.assert_allclose(lw.gaussianise(lw.heavy(u)), u, rtol=1e-10, atol=1e-12)
    # W_delta against an independent root finder of u * exp(delta u^2 / 2) = z
    for z in (-7.3, -0.4, 0.0, 0.9, 12.0):
        root = 0.0 if z == 0 else brentq(lambda v, z=z: v * np.exp(0.1 * v * v) - z, -abs(z) - 1, abs(z) + 1,
                                         xtol=1e-14)
        assert w_delta(np.array([z]), 0.2)[0] == pytest.approx(root, abs=1e-10)
    np.testing.assert_array_equal(w_delta(u, 0.0), u)  # delta 0: the identity
    assert h_delta(np.array([2.0]), 0.5)[0] == pytest.approx(2.0 * np.exp(1.0))
    # the fitted transform makes the sample near-Gaussian (excess kurtosis 0 by construction)
    g = lw.gaussianise(y)
    assert abs(np.mean((g - g.mean()) ** 4) / g.var() ** 2 - 3.0) < 0.05


def test_the_quantile_map_inverts_exactly_and_keeps_a_point_mass():
    rng = np.random.default_rng(3)
    x = np.where(rng.random(4000) < 0.5, 0.0, rng.standard_t(3, 4000) * 0.01)  # half exact zeros, heavy tails
    qm = QuantileMap.fit(x)
    u = qm.gaussianise(x)
    np.testing.assert_allclose(qm.heavy(u), x, rtol=0, atol=1e-15)
    # the coded column is a standard normal's quantiles, the ties at their run's middle (0 here): P(|u| > 1)
    assert np.mean(np.abs(u) > 1.0) == pytest.approx(0.3173, abs=0.01)
    # a standard normal goes back to the training distribution: the zeros' share, the same quantiles
    back = qm.heavy(rng.standard_normal(200_000))
    assert np.mean(back == 0.0) == pytest.approx(np.mean(x == 0.0), abs=0.01)
    np.testing.assert_allclose(np.quantile(back, [0.05, 0.95]), np.quantile(x, [0.05, 0.95]), rtol=0.05)
    # nothing beyond the training extremes, however far the generated value
    assert qm.heavy(np.array([-40.0, 40.0])).tolist() == [x.min(), x.max()]
    # the torch map (the generators' losses) is the numpy one, and differentiable
    t = torch.linspace(-3, 3, 101, dtype=torch.float64, requires_grad=True)
    out = qm.heavy_torch(t)
    np.testing.assert_allclose(out.detach().numpy(), qm.heavy(t.detach().numpy()), atol=1e-15)
    out.sum().backward()
    assert torch.isfinite(t.grad).all() and (t.grad >= 0).all()
    assert QuantileMap.from_state_dict(qm.state_dict()).heavy(u).tolist() == qm.heavy(u).tolist()


def test_the_coder_picks_the_quantile_map_for_a_point_mass_only():
    raw = _bars(3000)[0]
    coder = ResidualCoder.fit(raw, NAMES)
    kinds = {n: type(m).__name__ if m is not None else None for n, m in zip(NAMES, coder.marginals, strict=True)}
    # the hand-made gap is 0 on 30% of bars; the other heavy columns have no point mass
    assert kinds == {"gap": "QuantileMap", "ret": "LambertW", "up": None, "down": None, "dvol": "LambertW",
                     "logiv": "LambertW"}
    np.testing.assert_allclose(coder.decode(coder.encode(raw)), raw, rtol=1e-9, atol=1e-12)
    again = ResidualCoder.from_state_dict(coder.state_dict())
    np.testing.assert_array_equal(again.decode(again.encode(raw)), coder.decode(coder.encode(raw)))


def test_lambert_w_fit_recovers_a_known_delta():
    rng = np.random.default_rng(1)
    truth = LambertW(0.0005, 0.012, 0.2)
    y = truth.heavy(rng.normal(size=50_000))
    fit = LambertW.fit(y)
    assert fit.delta == pytest.approx(0.2, abs=0.02)
    assert fit.sigma == pytest.approx(0.012, rel=0.03) and fit.mu == pytest.approx(0.0005, abs=2e-4)


def test_the_filter_is_arch_s_and_bars_come_back_exactly_from_their_residuals():
    raw = _bars()
    filt = BarFilter.fit(raw, NAMES, window=20)
    res = arch_model(raw[0, :, 1] * 100, mean="Constant", vol="GARCH", p=1, o=1, q=1, dist="normal",
                     rescale=False).fit(disp="off")
    var = filt.variances(raw)
    np.testing.assert_allclose(np.sqrt(var[0, :-1]), res.conditional_volatility, rtol=1e-8)
    resid, var, prem = filt.residuals(raw)
    np.testing.assert_allclose(resid[0, :, 1], res.std_resid, rtol=1e-7, atol=1e-10)
    # running the filter forward over the residuals gives every column of every bar back
    state = filt.state_at(raw[..., 1], var, prem, np.array([0]), np.array([20]))
    back = np.stack([filt.step(resid[:, t], state)[0] for t in range(20, 400)])
    np.testing.assert_allclose(back, raw[0, 20:400], rtol=1e-9, atol=1e-12)
    # so does the coding the networks learn, encode then decode
    coder = ResidualCoder.fit(resid[:, 20:], NAMES)
    np.testing.assert_allclose(coder.decode(coder.encode(resid[0, 20:])), resid[0, 20:], rtol=1e-9, atol=1e-12)
    coded = coder.encode(resid[0, 20:])
    assert np.abs(coded.mean(axis=0)).max() < 1e-9 and np.abs(coded.std(axis=0) - 1).max() < 1e-9


def test_simulated_volatility_stays_in_the_training_range():
    raw = _bars()
    filt = BarFilter.fit(raw, NAMES, window=20)
    _, var, prem = filt.residuals(raw)
    state = filt.state_at(raw[..., 1], var, prem, np.zeros(50, dtype=np.int64), np.full(50, 1500))
    for _ in range(300):  # residuals far too large: the variance is kept at its training maximum
        resid = np.zeros((50, 6))
        resid[:, 1] = -6.0
        filt.step(resid, state)
    assert state.var.max() == pytest.approx(filt.garch[0].var_hi)
    g = Garch.fit(raw[0, :, 1])
    assert g.var_lo == pytest.approx(var[0, :-1].min()) and g.var_hi == pytest.approx(var[0, :-1].max())


def test_fhs_reproduces_a_garch_residual_bootstrap_in_numpy():
    """The filtered historical simulation of a seeded series equals a hand-written one: arch's GJR-GARCH(1,1) fit,
    its standardised residuals drawn with the same generator, its variance recursion run forward."""
    raw = _bars(seed=3)
    fhs = Fhs.fit(raw, NAMES, window=20)
    paths, length, seed = 7, 60, 11
    got = fhs.sample_features(paths, length, None, seed)
    res = arch_model(raw[0, :, 1] * 100, mean="Constant", vol="GARCH", p=1, o=1, q=1, dist="normal",
                     rescale=False).fit(disp="off")
    p = res.params
    z = np.asarray(res.std_resid)
    sigma = np.asarray(res.conditional_volatility)
    n = len(z)
    rng = np.random.default_rng(seed)
    rng.integers(1, size=paths)  # the underlying of each path (one here)
    e_last = raw[0, -1, 1] * 100 - p["mu"]
    var = np.full(paths, p["omega"] + (p["alpha[1]"] + p["gamma[1]"] * (e_last < 0)) * e_last ** 2
                  + p["beta[1]"] * sigma[-1] ** 2)
    expected = np.empty((paths, length))
    for t in range(length):
        draw = z[rng.integers(20, n, size=paths)]
        e = np.sqrt(var) * draw
        expected[:, t] = (p["mu"] + e) / 100
        var = np.clip(p["omega"] + (p["alpha[1]"] + p["gamma[1]"] * (e < 0)) * e ** 2 + p["beta[1]"] * var,
                      sigma.min() ** 2, sigma.max() ** 2)
    np.testing.assert_allclose(got[..., 1], expected, rtol=1e-7, atol=1e-12)
    # the other columns are training bars', rescaled to the path's volatility: at the first bar (volatility: the
    # state after the last training bar) each gap / volatility is a training bar's gap / its volatility
    ratios = raw[0, 20:, 0] / (sigma[20:] / 100)
    first = got[:, 0, 0] / (np.sqrt(fhs.var[0, -1]) / 100)
    assert all(np.isclose(ratios, g, rtol=1e-9, atol=1e-12).any() for g in first)


def test_transform_starts_and_state_columns():
    raw = _bars()
    tf = Transform.fit(raw, NAMES, 20)
    coded, cond = tf.training_rows()
    assert coded.shape == (1, 1500, 6) and cond.shape == (1, 1500, tf.n_cond)
    rng = np.random.default_rng(0)
    state, prev = tf.start(4, rng, "end")
    np.testing.assert_allclose(state.rets[0], raw[0, -20:, 1])
    np.testing.assert_allclose(prev[0], coded[0, -1])
    # a path starting before training bar b is in the state the training row of bar b records
    state, prev = tf.start(3, np.random.default_rng(5), "random")
    again = np.random.default_rng(5)
    again.integers(1, size=3)
    bars = again.integers(20, 1500, size=3)
    np.testing.assert_allclose(tf.cond(state, prev), cond[0, bars], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="one of end, random, regime"):
        tf.start(1, rng, "middle")


def test_a_regime_start_is_the_state_after_a_training_bar_of_that_regime():
    raw = _bars()
    tf = Transform.fit(raw, NAMES, 20)
    coded, cond = tf.training_rows()
    labels = (np.arange(1500) % 7 == 3).astype(np.int64)[None]  # regime 1 on every seventh bar
    state, prev = tf.start(50, np.random.default_rng(1), "regime", labels, 1)
    # the state after bar t is the one training row t + 1 records (the state after the last bar: tf.start "end")
    after = {t: cond[0, t + 1] for t in np.flatnonzero(labels[0] == 1) if 19 <= t < 1499}
    got = tf.cond(state, prev)
    assert all(any(np.allclose(g, c, rtol=1e-5, atol=1e-5) for c in after.values()) for g in got)
    last = raw[0, labels[0] == 1, 1]  # each state's window ends on a bar of the regime
    assert all(np.isclose(last, r, rtol=0, atol=1e-12).any() for r in state.rets[:, -1])
    assert len({tuple(np.round(g, 4)) for g in got}) > 10  # spread over the regime's bars, not one of them
    with pytest.raises(ValueError, match="no training bar is in regime 2"):
        tf.start(1, np.random.default_rng(1), "regime", labels, 2)
    with pytest.raises(ValueError, match="needs the training bars' labels"):
        tf.start(1, np.random.default_rng(1), "regime")


def test_calibration_undoes_a_known_scale_error():
    rng = np.random.default_rng(2)
    real = rng.standard_t(5, 20_000) * np.sqrt(3 / 5)
    logvar = rng.normal(size=real.size)

    def draw(rows):  # a generator 20% too wide on the downside at high variance, 10% too narrow on the upside
        z = rng.standard_t(5, len(rows) * 4) * np.sqrt(3 / 5)
        wide = np.repeat(logvar[rows] > np.quantile(logvar, 0.9), 4)
        return np.where(z < 0, z * np.where(wide, 1.2, 1.0), z * 0.9)

    cal = Calibration.fit(real, logvar, draw)
    assert cal.k_neg[-1] == pytest.approx(1 / 1.2, rel=0.05) and cal.k_neg[0] == pytest.approx(1.0, rel=0.05)
    assert all(k == pytest.approx(1 / 0.9, rel=0.05) for k in cal.k_pos)
    z = np.array([-1.0, 1.0])
    np.testing.assert_allclose(cal.factor(z, np.array([10.0, -10.0])), [cal.k_neg[-1], cal.k_pos[0]])
    assert Calibration.from_state_dict(cal.state_dict()) == cal


def test_the_coded_quantile_map_gives_draws_the_real_marginals_and_old_calibrations_load():
    rng = np.random.default_rng(8)
    real = rng.standard_normal((20_000, 3))
    # a generator too wide, shifted, and one column heavy-tailed where the real one is normal
    generated = np.stack([rng.normal(0.3, 1.2, 30_000), rng.normal(0, 0.9, 30_000),
                          rng.standard_t(3, 30_000)], axis=1)
    src, dst = Calibration.coded_quantiles(real, generated)
    cal = Calibration((), (1.0,), (1.0,), src, dst)
    fresh = np.stack([rng.normal(0.3, 1.2, 30_000), rng.normal(0, 0.9, 30_000), rng.standard_t(3, 30_000)], axis=1)
    moved = cal.coded(fresh)
    for i in range(3):  # every column's quantiles are the real ones' up to sampling noise, tails included
        np.testing.assert_allclose(np.quantile(moved[:, i], [0.01, 0.1, 0.5, 0.9, 0.99]),
                                   np.quantile(real[:, i], [0.01, 0.1, 0.5, 0.9, 0.99]), atol=0.1)
        np.testing.assert_allclose(np.quantile(moved[:, i], [0.001, 0.999]),
                                   np.quantile(real[:, i], [0.001, 0.999]), atol=0.25)
    # the t(3) column was far heavier before: its 0.1% quantile moved from about -10 to the normal's -3.1
    assert np.quantile(fresh[:, 2], 0.001) < -7
    assert np.abs(moved).max() <= np.abs(real).max() + 1e-12  # nothing past the real extremes
    # the map is monotone: the order of the draws (what the network made of its state) is kept
    order = np.argsort(fresh[:, 2])
    assert (np.diff(moved[order, 2]) >= 0).all()
    # a column drawn as a constant still maps (to the real median region), without dividing by zero
    flat = generated.copy()
    flat[:, 2] = 0.5
    src, dst = Calibration.coded_quantiles(real, flat)
    assert np.isfinite(Calibration((), (1.0,), (1.0,), src, dst).coded(flat)).all()
    assert Calibration.from_state_dict(cal.state_dict()) == cal
    # a checkpoint saved before the map has no such keys: it draws as it did
    loaded = Calibration.from_state_dict({"edges": [0.0], "k_neg": [1.0, 0.9], "k_pos": [1.1, 1.0]})
    assert loaded.coded_from == () and loaded.coded(generated) is generated


def test_a_conditional_model_s_draws_take_each_regime_s_own_marginal():
    """Real rows of two regimes skewed opposite ways, a generator that draws one symmetric shape for both: the map
    per regime gives each regime its own skew back; a regime with too few rows takes the pooled map."""
    from scipy.stats import skew

    from clstm_ppo.scenarios.residual_scale import MIN_REGIME_ROWS

    rng = np.random.default_rng(3)
    n = 20_000
    real_labels = np.repeat([0, 1, 2], [n, n, MIN_REGIME_ROWS - 1])
    real = np.concatenate([rng.gamma(4, 1, (n, 2)) - 4, 4 - rng.gamma(4, 1, (n, 2)),
                           rng.standard_normal((MIN_REGIME_ROWS - 1, 2))])
    gen_labels = np.repeat([0, 1, 2], [2 * n, 2 * n, 2 * n])
    generated = rng.standard_normal((6 * n, 2))
    src, dst = Calibration.coded_quantiles(real, generated)
    per_src, per_dst = Calibration.regime_quantiles(real, real_labels, generated, gen_labels, 3)
    assert per_src[2] == () and per_dst[2] == ()
    cal = Calibration((), (1.0,), (1.0,), src, dst, per_src, per_dst)
    fresh = rng.standard_normal((3 * n, 2))
    labels = np.repeat([0, 1, 2], n)
    moved = cal.coded(fresh, labels)
    assert skew(moved[labels == 0, 0]) > 0.8 and skew(moved[labels == 1, 0]) < -0.8  # gamma(4): skew 1.0
    np.testing.assert_allclose(moved[labels == 2], cal.coded(fresh[labels == 2]))  # the pooled map
    assert abs(skew(cal.coded(fresh)[:, 0])) < 0.2  # without labels: the pooled (mixture) map
    # one label for every row (a held regime) broadcasts
    np.testing.assert_allclose(cal.coded(fresh[:5], np.asarray(1)), cal.coded(fresh[:5], np.ones(5, dtype=int)))
    assert Calibration.from_state_dict(cal.state_dict()) == cal


def test_timegan_s_moment_loss_sees_a_generator_that_draws_one_window_for_every_noise():
    """The moments are compared over the batch per bar and column, and the spread along a window: one window
    repeated for the whole batch (varying along it as real windows do) is far from them, and so are flat windows
    drawn apart; the real windows in another order are not."""
    from clstm_ppo.scenarios.timegan import moment_loss

    torch.manual_seed(0)
    real = torch.randn(512, 24, 3)
    one_shape = real[:1].expand(512, -1, -1)  # pooled over the window, its spread is a real window's
    assert abs(one_shape.std(dim=(0, 1)) - real.std(dim=(0, 1))).mean() < 0.3
    assert moment_loss(one_shape, real) > 0.9
    assert moment_loss(real[torch.randperm(512)], real) < 1e-6
    assert moment_loss(torch.randn(512, 24, 3), real) < 0.15
    flat = torch.randn(512, 1, 3).expand(-1, 24, -1)  # a different window per noise, each nearly constant
    assert abs(flat.std(dim=0) - real.std(dim=0)).mean() < 0.15 and moment_loss(flat, real) > 0.9
