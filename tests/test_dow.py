"""The built-in Dow stocks (``--data dow``): 17 single stocks 2009-2020, one drawn per episode copy."""
import numpy as np
import pandas as pd
import pytest
import torch

from clstm_ppo.cli import run_cli
from clstm_ppo.config import Config
from clstm_ppo.data import BUILTIN_SOURCES, DataError, build_market_data, load_bars
from clstm_ppo.data.builtin import HOLIDAY_GAP_DAYS, carry_forward, tbill_to_continuous
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.market.inputs import market_inputs
from clstm_ppo.market.margin import margin_rates
from clstm_ppo.train import main as train_main

SYMBOLS = ["AAPL", "BA", "CAT", "CSCO", "DIS", "HD", "IBM", "KO", "MCD", "MMM", "NKE", "PG", "UNH", "UTX", "VZ",
           "WMT", "XOM"]


@pytest.fixture(scope="module")
def cfg():
    cfg = Config()
    cfg.data.source = "dow"
    return cfg


@pytest.fixture(scope="module")
def data(cfg):
    return build_market_data(cfg.data)


def test_dow_loads_by_name_with_17_stocks_over_2009_2020():
    frames = load_bars("dow")
    assert sorted(frames) == SYMBOLS
    for frame in frames.values():
        assert frame["date"].iloc[0] == pd.Timestamp("2009-01-26")
        assert frame["date"].iloc[-1] == pd.Timestamp("2020-01-24")
        assert len(frame) == 2769, "every stock is present on every day"
        assert frame.attrs["dividend_adjusted"], "Adj Close put the dividends into the prices"
        assert "iv" not in frame.columns, "the VIX is the index's vol, not a stock's"
    assert not BUILTIN_SOURCES["dow"].broad_index


def test_splits_are_ordered_non_empty_and_dated_as_documented(data):
    assert data.symbols == SYMBOLS
    bounds = [data.splits[name] for name in ("train", "validation", "test")]
    assert bounds[0][0] == 0 and bounds[-1][1] == len(data.dates)
    for (_, end), (next_start, _) in zip(bounds, bounds[1:], strict=False):
        assert end == next_start
    for start, end in bounds:
        assert end - start > data.window + 1
    assert data.split_dates("train")[1] <= pd.Timestamp("2016-12-31") < data.split_dates("validation")[0]
    assert data.split_dates("validation")[1] == pd.Timestamp("2018-12-31")
    assert data.split_dates("test") == (pd.Timestamp("2019-01-02"), pd.Timestamp("2020-01-24"))


def test_features_are_finite_and_normalised_on_training_only(data):
    assert np.isfinite(data.features).all() and np.isfinite(data.raw_features).all()
    train = data.features[:, slice(*data.splits["train"])]
    assert np.abs(train.mean(axis=(0, 1))).max() < 1e-3


def test_implied_vol_comes_from_the_model_and_every_bar_has_vol_and_rate(data, cfg):
    inputs = market_inputs(data, cfg.market)
    assert inputs.iv_source == "model"
    for series in (inputs.iv_close, inputs.iv_open):
        assert series.shape == (17, len(data.dates)) and np.isfinite(series).all()
        assert (series >= cfg.market.min_iv).all() and (series <= cfg.market.max_iv).all()
    assert np.isfinite(inputs.rate).all()
    assert (inputs.rate > -0.001).all() and (inputs.rate < 0.03).all(), "-0.01% (Sept 2015) to 2.4%"
    np.testing.assert_array_equal(inputs.dividend_yield, 0.0)
    # The T-bill series ends 2018-12-31: the test split (2019-2020) is priced at its last rate, by declaration.
    test = slice(*data.splits["test"])
    np.testing.assert_allclose(inputs.rate[:, test], tbill_to_continuous(np.array([2.40]))[0])
    assert np.ptp(inputs.rate[:, :data.splits["test"][0]]) > 0.01, "a real, moving rate before that"


def test_single_stocks_margin_at_stock_rates(data, cfg):
    rates = margin_rates(data.broad_index, len(data.symbols), cfg.market)
    np.testing.assert_allclose(rates, np.tile(cfg.market.stock_margin, (17, 1)))


def test_each_episode_copy_trades_one_underlying_and_copies_draw_many(data, cfg):
    env = BatchedOptionsEnv(data, "train", cfg.market, cfg.env, 16, seed=3)
    obs = env.reset()
    symbol = obs.row // env.n_bars
    seen = set(symbol.tolist())
    for _ in range(300):
        obs = env.step(torch.zeros(16, dtype=torch.long)).obs
        now = obs.row // env.n_bars
        assert ((now == symbol) | obs.start).all(), "a copy changes underlying only when a new episode starts"
        symbol = now
        seen |= set(now.tolist())
    assert len(seen) >= 12, "episodes draw their underlying from all 17"


def test_a_joined_series_is_never_carried_over_a_long_gap():
    table = pd.DataFrame({"rate_pct": [1.0, 2.0]}, index=pd.DatetimeIndex(["2010-01-04", "2010-03-01"]))
    dates = pd.DatetimeIndex(["2010-01-05", "2010-01-11", "2010-03-02"])
    assert carry_forward(table, dates, "t.csv", past_end=False)["rate_pct"].tolist() == [1.0, 1.0, 2.0]
    late = pd.DatetimeIndex(["2010-02-01"])
    with pytest.raises(DataError, match=f"t.csv: no value within {HOLIDAY_GAP_DAYS} days before 2010-02-01"):
        carry_forward(table, late, "t.csv", past_end=True)  # a hole inside the series
    after = pd.DatetimeIndex(["2010-06-01"])
    with pytest.raises(DataError, match="last is from 2010-03-01"):
        carry_forward(table, after, "t.csv", past_end=False)
    assert carry_forward(table, after, "t.csv", past_end=True)["rate_pct"].tolist() == [2.0]


def test_a_short_training_run_on_dow(tmp_path, capsys):
    sets = ["data.window=10", "env.episode_length=32", "agent.lstm1_hidden=8", "agent.mlp_hidden=8",
            "agent.lstm2_hidden=8", "ppo.num_steps=16", "ppo.update_epochs=1", "ppo.num_minibatches=2",
            "train.num_envs=4", "launch.threads_per_worker=1"]
    args = ["--data", "dow", "--total-steps", "128", "--checkpoint-dir", str(tmp_path)]
    assert run_cli(train_main, [*args, *[x for s in sets for x in ("--set", s)]]) == 0
    out = capsys.readouterr().out
    assert "data dow: AAPL, BA" in out and "test 2019-01-02..2020-01-24" in out
    assert "actions scale: 0, 0.5, 1, 1.5 x " in out  # the default agent times the stocks' best rule
    assert "credit position" in out
    assert (tmp_path / "dow-default" / "latest.pt").is_file()
