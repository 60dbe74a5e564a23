import numpy as np
import pandas as pd
import pytest

from clstm_ppo.config import DataConfig, SyntheticConfig
from clstm_ppo.data import FEATURE_NAMES, build_market_data, compute_features, generate_synthetic, turbulence
from clstm_ppo.data.features import log_returns


def featurise(frames: dict[str, pd.DataFrame], cfg: DataConfig) -> np.ndarray:
    frames = {s: f.set_index("date") for s, f in frames.items()}
    returns = np.stack([log_returns(f["close"]).to_numpy() for f in frames.values()], axis=1)
    turb = turbulence(returns, cfg.turbulence_lookback)
    return np.stack([compute_features(f, cfg, turb, 252.0).to_numpy() for f in frames.values()])


@pytest.mark.parametrize("cut", [150, 299, 420])
def test_no_feature_reads_a_later_bar(cut):
    cfg = DataConfig(turbulence_lookback=100)
    frames = generate_synthetic(SyntheticConfig(n_bars=500, n_underlyings=2, seed=3))
    base = featurise(frames, cfg)
    rng = np.random.default_rng(cut)
    altered = {}
    for symbol, frame in frames.items():
        frame = frame.copy()
        later = frame.index > cut
        scale = np.exp(rng.normal(0, 0.2, later.sum()))  # reshape every later bar, prices and volume
        for column in ("open", "high", "low", "close", "volume"):
            frame.loc[later, column] = frame.loc[later, column] * scale * rng.uniform(0.9, 1.1, later.sum())
        altered[symbol] = frame
    changed = featurise(altered, cfg)
    for f, name in enumerate(FEATURE_NAMES):
        np.testing.assert_array_equal(changed[:, : cut + 1, f], base[:, : cut + 1, f], err_msg=name)
        assert not np.allclose(changed[:, cut + 2:, f], base[:, cut + 2:, f], equal_nan=True), \
            f"{name}: altering later bars should change later features (else the test proves nothing)"


def test_features_are_finite_after_warmup_and_adx_warmup_is_dropped():
    data = build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=800)))
    assert np.isfinite(data.features).all() and np.isfinite(data.raw_features).all()
    assert (data.raw_features[..., FEATURE_NAMES.index("adx")] > 0).all()
    assert data.features.dtype == np.float32 and data.features.shape == (1, len(data.dates), len(FEATURE_NAMES))


def test_normalisation_uses_the_training_split_alone(tmp_path):
    frame = generate_synthetic(SyntheticConfig(n_bars=1500, seed=4))["SYN0"].drop(columns="regime")
    frame.to_csv(tmp_path / "calm.csv", index=False)
    cfg = DataConfig(source=str(tmp_path / "calm.csv"))
    data = build_market_data(cfg)
    train = slice(*data.splits["train"])
    raw_train = data.raw_features[:, train, :].reshape(-1, len(FEATURE_NAMES))
    np.testing.assert_allclose(data.normalizer.mean, raw_train.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(data.normalizer.std, raw_train.std(axis=0), rtol=1e-12)
    assert abs(data.features[:, train, :].mean()) < 1e-5
    # A wilder market after the training split leaves the statistics untouched.
    wild = frame.copy()
    after = wild.index >= data.splits["validation"][0] + (len(wild) - len(data.dates))
    shocks = np.exp(np.cumsum(np.random.default_rng(0).normal(0, 0.05, after.sum())))
    for column in ("open", "high", "low", "close"):
        wild.loc[after, column] *= shocks
    wild.loc[after, "volume"] *= 10
    wild.to_csv(tmp_path / "wild.csv", index=False)
    later = build_market_data(DataConfig(source=str(tmp_path / "wild.csv")))
    assert later.splits == data.splits
    assert not np.allclose(later.raw_features[:, -100:], data.raw_features[:, -100:])
    np.testing.assert_array_equal(later.normalizer.mean, data.normalizer.mean)
    np.testing.assert_array_equal(later.normalizer.std, data.normalizer.std)
    quantile = np.quantile(data.turbulence[train], cfg.turbulence_quantile)
    assert data.turbulence_threshold == pytest.approx(quantile)


def test_normaliser_round_trips_and_is_reapplied():
    cfg = DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=900))
    data = build_market_data(cfg)
    from clstm_ppo.data import Normalizer
    restored = Normalizer.from_state_dict(data.normalizer.state_dict())
    again = build_market_data(cfg, normalizer=restored)
    np.testing.assert_array_equal(again.features, data.features)


def test_synthetic_is_reproducible_and_regimes_change_volatility():
    cfg = SyntheticConfig(n_bars=4000, seed=11, regime_vol=[0.10, 0.45], regime_drift=[0.0, 0.0], jumps_per_year=0.0)
    a, b = generate_synthetic(cfg)["SYN0"], generate_synthetic(cfg)["SYN0"]
    pd.testing.assert_frame_equal(a, b)
    other = generate_synthetic(SyntheticConfig(n_bars=4000, seed=12))["SYN0"]
    assert not np.allclose(a["close"], other["close"])
    r = np.log(a["close"]).diff()
    calm, stormy = r[a["regime"] == 0].std(), r[a["regime"] == 1].std()
    assert (a["regime"] == 1).sum() > 200, "the seed should visit both regimes"
    assert stormy / calm == pytest.approx(4.5, rel=0.2)
