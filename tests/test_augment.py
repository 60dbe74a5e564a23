"""Training augmentation (data.augment, issue 22 item 5): generated underlyings join the training env only, on the
real dates, normalised with the real statistics; validation and test never see them; about ``augment`` of the
random episode starts land on them."""
import numpy as np
import pytest
import torch

from clstm_ppo.config import ConfigError, load_config, to_dict
from clstm_ppo.data import build_market_data
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.scenarios.augment import augmented_data
from clstm_ppo.scenarios.fit import FitOptions, fit_generator
from clstm_ppo.training.runner import Trainer

PATHS = 4


@pytest.fixture(scope="module")
def gen_path(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("augment")
    cfg = load_config("smoke", [])
    opts = FitOptions(steps=3, seq_len=12, batch_size=16, settings={"hidden": 8, "n_critic": 2}, progress=False)
    fit_generator(build_market_data(cfg.data), "cgan", root / "cgan.pt", opts, torch.device("cpu"),
                  data_config=to_dict(cfg.data))
    return root / "cgan.pt"


def _cfg(gen_path, share):
    sets = [f"data.augment={share}", f"data.augment_paths={PATHS}"]
    return load_config("smoke", [*sets, f"data.augment_checkpoint={gen_path}"] if share else sets)


def test_augmented_data_keeps_the_real_underlyings_and_their_statistics(gen_path):
    cfg = _cfg(gen_path, 0.3)
    real = build_market_data(cfg.data)
    data, weights = augmented_data(real, cfg)
    s = len(real.symbols)
    assert data.symbols[:s] == real.symbols and len(data.symbols) == s + PATHS
    assert data.splits == real.splits and data.dates.equals(real.dates) and data.normalizer is real.normalizer
    np.testing.assert_array_equal(data.features[:s], real.features)  # every real bar of every split unchanged
    for key, value in real.bars.items():
        np.testing.assert_array_equal(data.bars[key][:s], value)
    gen = data.raw_features[s:]
    np.testing.assert_allclose(data.features[s:], real.normalizer.apply(gen), rtol=1e-6)  # the real statistics
    assert np.isfinite(data.features).all()
    assert not np.allclose(data.bars["close"][s], data.bars["close"][s + 1])  # distinct paths
    assert weights == pytest.approx([0.7 / s] * s + [0.3 / PATHS] * PATHS) and sum(weights) == pytest.approx(1)
    again, _ = augmented_data(real, cfg)  # the pool is the run's seed's: a resume rebuilds the same one
    np.testing.assert_array_equal(again.bars["close"], data.bars["close"])


def test_about_augment_of_the_episodes_start_on_generated_underlyings(gen_path):
    cfg = _cfg(gen_path, 0.3)
    real = build_market_data(cfg.data)
    data, weights = augmented_data(real, cfg)
    env = BatchedOptionsEnv(data, "train", cfg.market, cfg.env, 512, device="cpu", seed=0, symbol_weights=weights)
    draws = []
    for _ in range(4):
        env.reset()
        draws.append(env.state.sym.numpy().copy())
    sym = np.concatenate(draws)
    share = float(np.mean(sym >= len(real.symbols)))
    assert share == pytest.approx(0.3, abs=0.04), share  # 2,048 draws: binomial std 0.01
    assert set(np.unique(sym)) == set(range(len(data.symbols)))  # every generated path is used


def test_validation_walks_stay_real_and_checkpoints_record_the_settings(gen_path, tmp_path):
    plain = Trainer(_cfg(gen_path, 0.0), tmp_path / "plain", torch.device("cpu"))
    mixed = Trainer(_cfg(gen_path, 0.3), tmp_path / "mixed", torch.device("cpu"))
    assert mixed.env.n_symbols == len(plain.data.symbols) + PATHS and plain.env.n_symbols == len(plain.data.symbols)
    assert mixed.data.symbols == plain.data.symbols  # the walks' data: real only
    np.testing.assert_array_equal(mixed.data.features, plain.data.features)
    mixed.model.load_state_dict(plain.model.state_dict())
    assert mixed.evaluate() == plain.evaluate()  # the same weights walk the same validation bars
    saved = mixed.state_dict()
    assert saved["config"]["data"]["augment"] == 0.3 and saved["config"]["data"]["augment_checkpoint"] == str(gen_path)
    assert saved["normalizer"] == plain.data.normalizer.state_dict()


def test_augment_without_a_checkpoint_or_of_another_feature_set_is_one_line(gen_path, tmp_path):
    with pytest.raises(ConfigError, match="data.augment \\(0.3\\) needs data.augment_checkpoint"):
        load_config("smoke", ["data.augment=0.3"])
    with pytest.raises(ConfigError, match="must be in \\[0, 1\\)"):
        load_config("smoke", ["data.augment=1.0", f"data.augment_checkpoint={gen_path}"])
    cfg = load_config("smoke", ["data.augment=0.3", f"data.augment_checkpoint={gen_path}", "market.iv_source=model"])
    real = build_market_data(cfg.data)
    del real.bars["iv"]  # a source without an iv column: the generator's logiv has nowhere to go
    with pytest.raises(ConfigError, match="the agent's data has gap, ret, up, down, dvol;"):
        augmented_data(real, cfg)
