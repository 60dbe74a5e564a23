"""The option market's features (market/observed.py): what the agent sees of the implied vol the env prices with,
each bar reading bars up to its own, normalised on the training split alone, and older checkpoints without them."""
import json

import numpy as np
import pandas as pd
import pytest
from conftest import make_bars

from clstm_ppo.config import Config, DataConfig, MarketConfig, load_config
from clstm_ppo.data import FEATURE_NAMES, build_market_data
from clstm_ppo.data.errors import DataError
from clstm_ppo.market.inputs import market_inputs
from clstm_ppo.market.observed import OPTION_FEATURE_NAMES, observed_market_data, option_feature_values

SPLIT = {"train_end": "2003-06-30", "val_end": "2003-12-31"}


def bars_with_iv(seed: int = 0) -> pd.DataFrame:
    frame = make_bars(1000, seed=seed)
    rng = np.random.default_rng(seed)
    frame["iv"] = 20.0 * np.exp(np.cumsum(rng.normal(0, 0.05, len(frame))) * 0.3)  # VIX-style points
    return frame


def config(path, **data) -> Config:
    return Config(data=DataConfig(source=str(path), turbulence_lookback=60, **SPLIT, **data),
                  market=MarketConfig())


def by_hand(iv: np.ndarray, realized: np.ndarray, year: int) -> np.ndarray:
    """The five features of one underlying, written out bar by bar in plain numpy."""
    out = np.zeros((len(iv), 5))
    for t in range(len(iv)):
        past = iv[max(0, t - year + 1):t + 1]
        z = 0.0
        if len(past) >= 20 and past.std(ddof=1) > 0:
            z = (iv[t] - past.mean()) / past.std(ddof=1)
        out[t] = [iv[t], iv[t] - realized[t], iv[t] - iv[max(t - 5, 0)], iv[t] - iv[max(t - 20, 0)], z]
    return out


@pytest.mark.parametrize("iv_source", ["column", "model"])
def test_each_feature_equals_a_plain_computation_from_the_implied_vol_the_market_prices_with(tmp_path, iv_source):
    path = tmp_path / "ABC.csv"
    bars_with_iv().to_csv(path, index=False)
    cfg = config(path)
    cfg.market.iv_source = iv_source
    data = observed_market_data(cfg)
    assert data.feature_names == (*FEATURE_NAMES, *OPTION_FEATURE_NAMES)
    base = build_market_data(cfg.data)
    iv = market_inputs(base, cfg.market).iv_close[0]
    if iv_source == "column":  # the VIX-style column in decimals, scaled to at-the-money as the market quotes it
        raw_iv = pd.read_csv(path)["iv"].to_numpy()[-len(base.dates):] / 100.0
        np.testing.assert_allclose(iv, np.clip(raw_iv * cfg.market.atm_per_iv, cfg.market.min_iv, cfg.market.max_iv))
    realized = base.raw_features[0, :, FEATURE_NAMES.index("realized_vol")]
    expected = by_hand(iv, realized, 252)
    np.testing.assert_allclose(data.raw_features[0, :, len(FEATURE_NAMES):], expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(data.raw_features[..., :len(FEATURE_NAMES)], base.raw_features)
    assert np.isfinite(data.features).all()


@pytest.mark.parametrize("cut", [300, 520])
def test_no_option_feature_reads_a_later_bar(tmp_path, cut):
    """Bars after ``cut`` (prices, volume and the implied vol) reshaped: no option feature up to ``cut`` moves, and
    later ones do. With the VIX-style column every bar is causal; the model's implied vol is too, but for its floor
    (a training-split statistic), so there only bars after the training split are altered."""
    frame = bars_with_iv(1)
    rng = np.random.default_rng(cut)
    for iv_source, cut_at in (("column", cut), ("model", None)):
        cfg = config(tmp_path / "a.csv")
        cfg.market.iv_source = iv_source
        frame.to_csv(tmp_path / "a.csv", index=False)
        base = build_market_data(cfg.data)
        first = len(frame) - len(base.dates)  # warm-up rows dropped by the data layer
        row = cut_at if cut_at is not None else first + base.splits["train"][1]
        altered = frame.astype({"Volume": float})
        later = altered.index > row
        for column in ("Open", "High", "Low", "Close", "Volume", "iv"):
            altered.loc[later, column] = altered.loc[later, column] * np.exp(rng.normal(0, 0.2, later.sum()))
        altered["High"] = altered[["Open", "High", "Close"]].max(axis=1)
        altered["Low"] = altered[["Open", "Low", "Close"]].min(axis=1)
        altered.to_csv(tmp_path / "b.csv", index=False)
        before = option_feature_values(base, cfg.market)
        cfg_b = config(tmp_path / "b.csv")
        cfg_b.market.iv_source = iv_source
        after = option_feature_values(build_market_data(cfg_b.data), cfg.market)
        keep = row - first + 1  # the bars up to the cut
        np.testing.assert_array_equal(after[:, :keep], before[:, :keep], err_msg=iv_source)
        for f, name in enumerate(OPTION_FEATURE_NAMES):
            assert not np.allclose(after[:, keep + 1:, f], before[:, keep + 1:, f]), f"{iv_source} {name}: unchanged"


def test_the_option_features_are_normalised_on_the_training_split_alone(tmp_path):
    frame = bars_with_iv(2)
    frame.to_csv(tmp_path / "a.csv", index=False)
    data = observed_market_data(config(tmp_path / "a.csv"))
    train_end = data.splits["train"][1]
    wild = frame.copy()
    wild.loc[wild.index > len(frame) - 200, "iv"] *= 3.0  # a volatility spike in the test years
    wild.to_csv(tmp_path / "b.csv", index=False)
    other = observed_market_data(config(tmp_path / "b.csv"))
    assert other.splits == data.splits
    np.testing.assert_array_equal(other.normalizer.mean, data.normalizer.mean)
    np.testing.assert_array_equal(other.normalizer.std, data.normalizer.std)
    k = len(FEATURE_NAMES)
    train = data.raw_features[:, :train_end, k:].reshape(-1, len(OPTION_FEATURE_NAMES))
    np.testing.assert_allclose(data.normalizer.mean[k:], train.mean(0))
    np.testing.assert_allclose(data.features[:, :train_end, k:].reshape(-1, 5).mean(0), 0.0, atol=1e-5)


def test_a_normaliser_of_another_feature_set_is_one_clear_line(tmp_path):
    make_bars(1000).to_csv(tmp_path / "a.csv", index=False)
    without = observed_market_data(config(tmp_path / "a.csv", option_features=False))
    assert without.feature_names == FEATURE_NAMES
    with pytest.raises(DataError, match="set data.option_features as the checkpoint was trained"):
        observed_market_data(config(tmp_path / "a.csv"), without.normalizer)


def test_a_checkpoint_saved_before_the_option_features_loads_and_walks_without_them(tmp_path, capsys):
    """A run trained without the setting (its saved config lacks the key, as every checkpoint before it) reads as
    option_features false: the model's 11 features, and evaluate walks it as before."""
    import torch

    from clstm_ppo.agent.from_checkpoint import load_agent
    from clstm_ppo.cli import run_cli
    from clstm_ppo.evaluate import main as evaluate
    from clstm_ppo.run_files.run_state import load_checkpoint, save_checkpoint
    from clstm_ppo.train import main as train

    assert run_cli(train, ["--config", "smoke", "--checkpoint-dir", str(tmp_path), "--total-steps", "512",
                           "--set", "data.option_features=false", "--set", "train.num_envs=16"]) == 0
    path = tmp_path / "synthetic-smoke" / "latest.pt"
    state = load_checkpoint(path)
    del state.config["data"]["option_features"]  # as written before the setting existed
    old = tmp_path / "old.pt"
    save_checkpoint(state, old)
    cfg, data, model = load_agent(str(old), None, [], torch.device("cpu"))
    assert cfg.data.option_features is False and data.feature_names == FEATURE_NAMES
    assert model.encoder.lstm.input_size == len(FEATURE_NAMES)
    capsys.readouterr()
    for checkpoint in (path, old):
        assert run_cli(evaluate, ["--checkpoint", str(checkpoint), "--split", "validation", "--json",
                                  str(tmp_path / f"{checkpoint.stem}.json")]) == 0
    reports = [json.loads((tmp_path / f"{p.stem}.json").read_text()) for p in (path, old)]
    assert reports[0]["policies"] == reports[1]["policies"]
    assert load_config("default", []).data.option_features is True  # new runs observe them
