"""Scenario generators: fitted on the training split alone, resumable, sampled into files the loader reads, paths of
any length that neither die out nor run away, and the command's one-line errors."""

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import make_bars, strict_loads

from clstm_ppo.cli import run_cli
from clstm_ppo.config import DataConfig
from clstm_ppo.data import build_market_data, load_bars
from clstm_ppo.run_files.checkpoint import atomic_save
from clstm_ppo.scenarios.__main__ import main
from clstm_ppo.scenarios.bar_columns import bar_features, reconstruct
from clstm_ppo.scenarios.fit import FitOptions, fit_generator
from clstm_ppo.scenarios.generator import MODELS, load_generator

TINY = {"wgan_gp": {"hidden": 8, "n_critic": 2}, "cgan": {"hidden": 8, "n_critic": 2}, "timegan": {"hidden": 8}}
STEPS = {"wgan_gp": 3, "cgan": 3, "timegan": 8}  # TimeGAN's 8: two embedding, two supervised, four joint steps


def _bars_file(path, seed=0, n=700):
    frame = make_bars(n, seed)
    frame["IV"] = 0.2 * np.exp(np.random.default_rng(seed + 1).normal(0, 0.05, n))
    frame.to_csv(path, index=False)
    return path


def _data(path, window=10):
    return build_market_data(DataConfig(source=str(path), window=window))


def _fit(data, kind, out, steps=None, **kw):
    opts = FitOptions(steps=steps or STEPS[kind], seq_len=12, batch_size=16, settings=TINY[kind], progress=False, **kw)
    return fit_generator(data, kind, out, opts, torch.device("cpu"))


def _weights(gen):
    return {f"{n}.{k}": v.clone() for n, net in gen.model.nets().items() for k, v in net.state_dict().items()}


@pytest.mark.parametrize("kind", list(MODELS))
def test_changing_validation_or_test_bars_leaves_weights_unchanged(tmp_path, kind):
    path = _bars_file(tmp_path / "A.csv")
    data = _data(path)
    cut = data.splits["train"][1]
    frame = pd.read_csv(path)
    later = frame["Date"] > str(data.dates[cut - 1].date())
    rng = np.random.default_rng(9)
    for col in ("Open", "High", "Low", "Close", "IV"):  # every later bar moves, consistently
        frame.loc[later, col] *= np.exp(rng.normal(0, 0.05, later.sum())) * (1.3 if col != "IV" else 2.0)
    frame.loc[later, "High"] = frame.loc[later, ["Open", "High", "Low", "Close"]].max(axis=1)
    frame.loc[later, "Low"] = frame.loc[later, ["Open", "High", "Low", "Close"]].min(axis=1)
    frame.loc[later, "Volume"] = frame.loc[later, "Volume"] * 3
    frame.to_csv(tmp_path / "B.csv", index=False)
    changed = _data(tmp_path / "B.csv")
    assert changed.splits == data.splits and not np.allclose(changed.bars["close"], data.bars["close"])
    a = _weights(_fit(data, kind, tmp_path / "a" / f"{kind}.pt"))
    b = _weights(_fit(changed, kind, tmp_path / "b" / f"{kind}.pt"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    ga, gb = load_generator(tmp_path / "a" / f"{kind}.pt"), load_generator(tmp_path / "b" / f"{kind}.pt")
    ta, tb = ga.transform.state_dict(), gb.transform.state_dict()  # the filter, the coding, the training states
    assert ta["filter"] == tb["filter"] and ta["coder"] == tb["coder"]
    for key in ("ret", "var", "prem", "coded"):
        np.testing.assert_array_equal(ta[key], tb[key])
    assert ga.regimes == gb.regimes and ga.calibration == gb.calibration and ga.extra["transitions"] == gb.extra[
        "transitions"]


def test_resume_gives_the_same_weights_as_one_run(tmp_path):
    data = _data(_bars_file(tmp_path / "A.csv"))
    whole = _weights(_fit(data, "wgan_gp", tmp_path / "w" / "wgan_gp.pt", steps=4))
    _fit(data, "wgan_gp", tmp_path / "r" / "wgan_gp.pt", steps=2)
    opts = FitOptions(steps=4, seq_len=12, batch_size=16, settings=TINY["wgan_gp"], progress=False)
    resumed = _weights(fit_generator(data, "wgan_gp", tmp_path / "r" / "wgan_gp.pt", opts, torch.device("cpu"),
                                     resume=True))
    for key in whole:
        assert torch.equal(whole[key], resumed[key]), key


def test_reconstruction_round_trips_and_bars_are_consistent():
    rng = np.random.default_rng(0)
    names = ("gap", "ret", "up", "down", "dvol", "logiv")
    x = rng.normal(0, 0.02, size=(5, 40, 6))
    x[..., 5] = np.log(0.2) + rng.normal(0, 0.1, (5, 40))
    start = {"close": 100.0, "volume": 1e6, "iv": 0.2, "date": "2020-01-02"}
    bars = reconstruct(x, names, start)
    assert (bars["low"] <= np.minimum(bars["open"], bars["close"])).all()
    assert (np.maximum(bars["open"], bars["close"]) <= bars["high"]).all()
    assert all((v > 0).all() for v in bars.values())
    # prepend the start bar and the columns come back (wicks as their absolute value)
    full = {k: np.concatenate([np.full((5, 1), start.get(k, 100.0)), v], axis=1) for k, v in bars.items()}
    back = bar_features(full, names)
    expect = x.copy()
    expect[..., 2:4] = np.abs(expect[..., 2:4])
    np.testing.assert_allclose(back, expect, atol=1e-9)


def test_generated_file_passes_the_loader_and_the_pipeline(tmp_path):
    data = _data(_bars_file(tmp_path / "A.csv"))
    gen = _fit(data, "cgan", tmp_path / "cgan.pt")
    frame = gen.sample_frame(3, 450, "bear", seed=1)
    assert set(frame.columns) == {"date", "symbol", "open", "high", "low", "close", "volume", "iv"}
    assert (frame["low"] <= frame[["open", "close"]].min(axis=1)).all()
    assert (frame[["open", "close"]].max(axis=1) <= frame["high"]).all()
    assert (frame[["open", "high", "low", "close", "volume", "iv"]] > 0).all().all()
    frame.to_parquet(tmp_path / "paths.parquet", index=False)
    loaded = load_bars(str(tmp_path / "paths.parquet"))
    assert sorted(loaded) == ["P0", "P1", "P2"] and len(loaded["P1"]) == 450
    market = build_market_data(DataConfig(source=str(tmp_path / "paths.parquet"), window=10))
    assert market.symbols == ["P0", "P1", "P2"] and np.isfinite(market.features).all()
    # the same seed gives the same paths; another seed other paths
    np.testing.assert_array_equal(gen.sample_features(2, 30, "bull", 4), gen.sample_features(2, 30, "bull", 4))
    assert not np.array_equal(gen.sample_features(2, 30, "bull", 4), gen.sample_features(2, 30, "bull", 5))


def _one_line_error(capsys, argv):
    capsys.readouterr()  # drop what came before (a progress bar's first frame)
    code = run_cli(main, argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and err.startswith("error: "), err
    return err


def test_command_errors_are_one_line(tmp_path, capsys):
    path = _bars_file(tmp_path / "A.csv")
    assert "moon_gan" in _one_line_error(capsys, ["train", "--data", str(path), "--model", "moon_gan"])
    data = _data(path)
    _fit(data, "wgan_gp", tmp_path / "wgan_gp.pt")
    _fit(data, "cgan", tmp_path / "cgan.pt")
    out = str(tmp_path / "p.parquet")
    err = _one_line_error(capsys, ["sample", "--checkpoint", str(tmp_path / "wgan_gp.pt"), "--paths", "2",
                                   "--regime", "crash", "--out", out])
    assert "regime" in err
    err = _one_line_error(capsys, ["sample", "--checkpoint", str(tmp_path / "cgan.pt"), "--paths", "2",
                                   "--regime", "euphoria", "--out", out])
    assert "bull, bear, sideways, crash" in err
    state = torch.load(tmp_path / "cgan.pt", weights_only=True)
    state["feature_names"] = ["ret", "rsi"]
    state["feature_set"] = "indicators-v0"
    atomic_save(state, tmp_path / "other.pt")
    err = _one_line_error(capsys, ["report", "--checkpoint", str(tmp_path / "other.pt")])
    assert "another feature set" in err
    atomic_save({"format": "clstm_ppo-checkpoint-v1"}, tmp_path / "agent.pt")
    assert "agent checkpoint" in _one_line_error(capsys, ["sample", "--checkpoint", str(tmp_path / "agent.pt"),
                                                         "--paths", "1", "--out", out])
    assert "exists" in _one_line_error(capsys, ["train", "--data", str(path), "--model", "wgan_gp",
                                                "--out", str(tmp_path), "--steps", "1"])


def test_command_train_sample_report(tmp_path, capsys):
    path = _bars_file(tmp_path / "A.csv")
    out = tmp_path / "gens"
    assert main(["train", "--data", str(path), "--model", "timegan", "--out", str(out), "--steps", "8",
                 "--seq-len", "12", "--set", "data.window=10"]) == 0
    assert (out / "timegan.pt").is_file() and (out / "timegan_logs" / "metrics.jsonl").is_file()
    assert main(["sample", "--checkpoint", str(out / "timegan.pt"), "--paths", "4", "--length", "30",
                 "--out", str(tmp_path / "s.csv")]) == 0
    assert sorted(load_bars(str(tmp_path / "s.csv"))) == ["P0", "P1", "P2", "P3"]
    assert main(["report", "--checkpoint", str(out / "timegan.pt"), "--paths", "12", "--length", "120",
                 "--runs", "1", "--judge-iters", "3", "--json", str(tmp_path / "r.json"),
                 "--plot", str(tmp_path / "plots")]) == 0
    report = strict_loads((tmp_path / "r.json").read_text())
    for name in ("model", "garch_t", "bootstrap"):
        row = report[name]
        assert {"discriminative_score", "discriminative_score_strict", "predictive_score", "emd", "acf_score",
                "leverage_score", "kurtosis", "skew"} <= set(row)
        assert set(row["acf_score"]) == {"r", "abs", "sq"} and "1" in row["emd"]
        assert 0.0 <= row["discriminative_score"] <= 0.5
    assert (tmp_path / "plots" / "acf_leverage.png").is_file()
    assert "garch_t" in capsys.readouterr().out


def test_sample_market_data_puts_each_path_in_its_own_test_split(tmp_path):
    cfg = DataConfig(source=str(_bars_file(tmp_path / "A.csv")), window=10, turbulence_lookback=50)
    data = build_market_data(cfg)
    gen = _fit(data, "wgan_gp", tmp_path / "wgan_gp.pt")
    from clstm_ppo.config.resolve import to_dict
    from clstm_ppo.scenarios.market import path_closes, sample_market_data

    gen.data["config"] = to_dict(cfg)
    markets = sample_market_data(gen, paths=2, length=40, seed=3)
    assert len(markets) == 2
    np.testing.assert_allclose(path_closes(markets), gen.sample_prices(2, 40, None, 3, start={
        "close": data.bars["close"][0, data.splits["train"][1] - 1], "volume": 1.0})["close"], rtol=1e-9)
    for m in markets:
        t0, t1 = m.splits["test"]
        assert t1 - t0 == 40 and m.dates[t0 - 1] == data.dates[data.splits["train"][1] - 1]
        assert np.isfinite(m.features).all()
        np.testing.assert_array_equal(m.normalizer.mean, data.normalizer.mean)  # the real statistics


@pytest.mark.parametrize("kind", list(MODELS))
def test_paths_of_any_length_keep_the_volatility_in_its_training_range(tmp_path, kind):
    """1,000 bars from an (untrained) generator: whatever its residuals, the filter's variance stays within the training
    split's filtered range (so no path's volatility dies out or runs away), every bar is finite and the prices
    positive; the drift measure of the report sees filtered historical simulation's returns as steady."""
    from clstm_ppo.scenarios.baselines import Fhs
    from clstm_ppo.scenarios.fit import training_set
    from clstm_ppo.scenarios.verdict import drift

    data = _data(_bars_file(tmp_path / "A.csv"))
    gen = _fit(data, kind, tmp_path / f"{kind}.pt")
    paths = gen.sample_features(20, 1000, None, 0)
    assert paths.shape == (20, 1000, len(gen.feature_names)) and np.isfinite(paths).all()
    ret = paths[..., gen.feature_names.index("ret")]
    garch = gen.transform.filt.garch[0]
    lo, hi = np.sqrt(garch.var_lo) / 100, np.sqrt(garch.var_hi) / 100
    z_max = np.abs(gen.transform.coder.decode(np.array([gen.transform.coder.lo, gen.transform.coder.hi]))).max()
    assert np.abs(ret - garch.mu / 100).max() <= hi * z_max * max(gen.calibration.k_neg + gen.calibration.k_pos) + 1e-12
    assert (gen.sample_prices(5, 1000, None, 1)["close"] > 0).all() and lo > 0
    ts = training_set(data)
    col = ts.names.index("ret")
    steady = drift(Fhs.fit(ts.raw, ts.names).sample_features(50, 1000, None, 0)[..., col:col + 1],
                   ts.raw[0, :, col:col + 1].std(axis=0))
    assert steady["ok"], steady


def test_a_generator_fits_a_walk_forward_fold_s_training_years(tmp_path, capsys):
    from clstm_ppo.data.folds import walk_forward_folds

    fold = walk_forward_folds(build_market_data(DataConfig(source="sp500")).dates, 3)[0]
    assert main(["train", "--data", "sp500", "--model", "wgan_gp", "--steps", "1", "--folds", "3", "--fold", "0",
                 "--out", str(tmp_path)]) == 0
    last = pd.Timestamp(load_generator(tmp_path / "wgan_gp.pt").data["train_last"])
    # the fold's last training bar: on or just before its train_end (a year end may fall on a weekend)
    assert pd.Timestamp(fold.train_end) - pd.Timedelta(days=7) <= last <= pd.Timestamp(fold.train_end)
    for bad in (["--fold", "3", "--folds", "3"], ["--fold", "0"], ["--folds", "3"]):
        err = _one_line_error(capsys, ["train", "--data", "sp500", "--model", "wgan_gp", "--out", str(tmp_path / "x"),
                                       *bad])
        assert "--fold K --folds N go together, with 0 <= K < N" in err
