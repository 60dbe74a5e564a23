"""The regime-recognisability measurement: a classifier fitted on real training-split windows and their
regime labels, scored on real held-out windows and on generated windows of each requested regime."""

import numpy as np
import pandas as pd
import pytest
from conftest import strict_loads

from clstm_ppo.config import DataConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.scenarios.__main__ import main
from clstm_ppo.scenarios.fit import training_set
from clstm_ppo.scenarios.quality_report import held_out_features
from clstm_ppo.scenarios.recognise import (
    RegimeClassifier,
    held_out_windows,
    measure,
    regime_report,
    training_windows,
)
from clstm_ppo.scenarios.regime_labels import REGIMES, RegimeRule

# daily drift and volatility of each regime's blocks: far apart in trailing return, and crash far apart in vol
BLOCKS = {"bull": (0.006, 0.004), "bear": (-0.004, 0.006), "sideways": (0.0, 0.003), "crash": (-0.015, 0.03)}
LENGTH = 24


def _regime_csv(path, n=2400, seed=0, block=60):
    """Bars whose returns come in blocks of one regime each; crash blocks rarer, as in markets."""
    rng = np.random.default_rng(seed)
    names = rng.choice(list(BLOCKS), size=n // block + 1, p=[0.3, 0.3, 0.3, 0.1])
    ret = np.concatenate([rng.normal(*BLOCKS[name], block) for name in names])[:n]
    close = 100 * np.exp(np.cumsum(ret))
    open_ = close * np.exp(rng.normal(0, 0.002, n))
    pd.DataFrame({"Date": pd.bdate_range("2001-01-01", periods=n).strftime("%Y-%m-%d"), "Open": open_,
                  "High": np.maximum(open_, close) * 1.004, "Low": np.minimum(open_, close) * 0.996, "Close": close,
                  "Volume": rng.integers(1_000_000, 2_000_000, n)}).to_csv(path, index=False)
    return path


def _setup(path):
    data = build_market_data(DataConfig(source=str(path), window=10))
    ts = training_set(data, 20)
    held = held_out_features(data, ts.names)[..., ts.names.index("ret")]
    return data, ts, held


@pytest.fixture(scope="module")
def regime_data(tmp_path_factory):
    return _setup(_regime_csv(tmp_path_factory.mktemp("regimes") / "R.csv"))


class FakeGenerator:
    """Stands in for a conditional FittedGenerator: ``draw(regime index, paths, rng)`` gives (n, L) returns."""

    def __init__(self, ts, draw, seq_len=LENGTH):
        self.feature_names, self.regimes, self.seq_len, self.draw = ts.names, ts.rule, seq_len, draw

    def sample_features(self, paths, length, regime, seed, start="end", proposals=None):
        ret = self.draw(REGIMES.index(regime), paths, np.random.default_rng(seed))
        out = np.zeros((*ret.shape, len(self.feature_names)))
        out[..., self.feature_names.index("ret")] = ret
        return out


def test_separable_regimes_score_near_one_on_real_held_out_windows(regime_data):
    _, ts, held = regime_data
    x, y = training_windows(ts, LENGTH)
    clf = RegimeClassifier.fit(x, y, ts.rule.window)
    real, labels = held_out_windows(held, ts.rule, LENGTH)
    assert set(labels.tolist()) == set(range(len(REGIMES)))  # every regime is in the held-out bars
    assert clf.accuracy(x, y) > 0.95
    assert clf.accuracy(real, labels) > 0.95
    # against a classifier that learned nothing (the training split's commonest label everywhere)
    assert np.mean(labels == np.bincount(y).argmax()) < 0.5


def test_generated_windows_equal_to_real_ones_give_no_gap(regime_data):
    _, ts, held = regime_data
    real, labels = held_out_windows(held, ts.rule, LENGTH)
    clf = RegimeClassifier.fit(*training_windows(ts, LENGTH), ts.rule.window)
    out = measure(clf, real, labels, {i: real[labels == i] for i in range(len(REGIMES))})
    assert out["gap_points"] == pytest.approx(0.0, abs=1e-9) and out["goal_met"]
    for name in REGIMES:
        assert out["per_regime"][name]["agreement_generated"] == out["per_regime"][name]["recall_real"]
    # the same through the report's block: a "generator" whose regime-r paths are the real held-out windows of r
    block = regime_report(FakeGenerator(ts, lambda i, n, rng: real[labels == i]), ts, held, 1, LENGTH, 0, 252.0)
    assert block["gap_points"] == pytest.approx(0.0, abs=1e-9)
    assert block["classifier_accuracy_real"] == pytest.approx(out["classifier_accuracy_real"])
    assert block["windows_real_held_out"] == len(labels)


def test_a_generator_that_ignores_its_label_scores_near_chance(regime_data):
    _, ts, held = regime_data
    real, labels = held_out_windows(held, ts.rule, LENGTH)
    blind = FakeGenerator(ts, lambda i, n, rng: real[rng.integers(len(real), size=n)])  # any regime, any label
    block = regime_report(blind, ts, held, 3000, LENGTH, 0, 252.0)
    clf = RegimeClassifier.fit(*training_windows(ts, LENGTH), ts.rule.window)
    predicted = np.bincount(clf.predict(real), minlength=len(REGIMES)) / len(real)
    share = np.bincount(labels, minlength=len(REGIMES)) / len(labels)
    chance = float(np.sum(share * predicted))  # P(label = requested) when the label does not depend on the request
    assert block["classifier_accuracy_real"] > 0.95
    assert block["classifier_accuracy_generated"] == pytest.approx(chance, abs=0.04)
    assert block["gap_points"] > 50 and not block["goal_met"]


def test_volatility_and_skew_order_of_the_generated_regimes(regime_data):
    _, ts, _ = regime_data
    held = ts.raw[..., ts.names.index("ret")]  # any returns will do as the held-out reference here

    def wild(i, n, rng, scale=(0.01, 0.02, 0.01, 0.04)):  # bear and crash: wider and skewed to the left
        x = rng.normal(0, scale[i], (n, LENGTH))
        return x - rng.exponential(scale[i], (n, LENGTH)) if REGIMES[i] in ("bear", "crash") else x

    block = regime_report(FakeGenerator(ts, wild), ts, held, 500, LENGTH, 0, 252.0)
    assert block["order_met"]["generated"]
    assert block["vol"]["crash"]["generated"] > block["vol"]["bull"]["generated"]
    assert block["skew"]["bear"]["generated"] < -0.3 < block["skew"]["bull"]["generated"]
    flat = regime_report(FakeGenerator(ts, lambda i, n, rng: rng.normal(0, 0.01, (n, LENGTH))), ts, held, 500,
                         LENGTH, 0, 252.0)
    assert not flat["order_met"]["generated"]  # one distribution for every label cannot order them


def test_fitting_reads_no_bar_after_the_training_split(tmp_path, regime_data, monkeypatch):
    data, ts, held = regime_data
    path = _regime_csv(tmp_path / "A.csv")
    frame = pd.read_csv(path)
    later = frame["Date"] > str(data.dates[data.splits["train"][1] - 1].date())
    rng = np.random.default_rng(3)
    for col in ("Open", "High", "Low", "Close"):  # every later bar moves; the wicks stay around the body
        frame.loc[later, col] *= np.exp(rng.normal(0, 0.05, later.sum()))
    frame.loc[later, "High"] = frame.loc[later, ["Open", "High", "Low", "Close"]].max(axis=1)
    frame.loc[later, "Low"] = frame.loc[later, ["Open", "High", "Low", "Close"]].min(axis=1)
    frame.to_csv(tmp_path / "B.csv", index=False)
    changed_data, changed, changed_held = _setup(tmp_path / "B.csv")
    assert changed_data.splits == data.splits and not np.array_equal(changed_held, held)
    fitted = []  # what the report's classifier is fitted on, each time
    real_fit = RegimeClassifier.fit.__func__
    monkeypatch.setattr(RegimeClassifier, "fit", classmethod(
        lambda cls, x, y, window: fitted.append((x.copy(), y.copy())) or real_fit(cls, x, y, window)))
    noise = FakeGenerator(ts, lambda i, n, rng: rng.normal(0, 0.01, (n, LENGTH)))
    before = regime_report(noise, ts, held, 50, LENGTH, 0, 252.0)
    after = regime_report(FakeGenerator(changed, noise.draw), changed, changed_held, 50, LENGTH, 0, 252.0)
    (x, y), (cx, cy) = fitted
    np.testing.assert_array_equal(x, cx)
    np.testing.assert_array_equal(y, cy)
    assert before["classifier_accuracy_train"] == after["classifier_accuracy_train"]
    # the later bars are labelled with the training split's thresholds, not with thresholds refitted on them
    assert changed.rule == ts.rule
    counts = np.bincount(ts.rule.label(changed_held)[:, LENGTH - 1:].ravel(), minlength=len(REGIMES))
    assert [after["per_regime"][n]["windows_real_held_out"] for n in REGIMES] == counts.tolist()
    refit = np.bincount(RegimeRule.fit(changed_held).label(changed_held)[:, LENGTH - 1:].ravel(),
                        minlength=len(REGIMES))
    assert refit.tolist() != counts.tolist()  # the control: a refit would have given other labels
    # the control: a changed training bar does change what the classifier is fitted on
    frame = pd.read_csv(path)
    inside = frame["Date"] == str(data.dates[data.splits["train"][1] // 2].date())  # a bar inside the split
    frame.loc[inside, ["Close", "High"]] *= 1.2
    frame.to_csv(tmp_path / "C.csv", index=False)
    assert not np.array_equal(training_windows(_setup(tmp_path / "C.csv")[1], LENGTH)[0], x)


def test_report_has_a_regimes_block_for_conditional_checkpoints_only(tmp_path, capsys):
    path = _regime_csv(tmp_path / "A.csv", n=900)
    for model in ("cgan", "wgan_gp"):
        assert main(["train", "--data", str(path), "--model", model, "--out", str(tmp_path), "--steps", "2",
                     "--seq-len", "12", "--batch-size", "8", "--set", "data.window=10"]) == 0
        assert main(["report", "--checkpoint", str(tmp_path / f"{model}.pt"), "--paths", "6", "--length", "60",
                     "--runs", "1", "--judge-iters", "2", "--json", str(tmp_path / f"{model}.json")]) == 0
    report = strict_loads((tmp_path / "cgan.json").read_text())
    block = report["regimes"]
    assert block["paths_start"] == report["regimes_network_alone"]["paths_start"] == "regime"
    assert block["window_bars"] == 20  # windows of 12 bars are too short for the 20-bar label: 20 are judged
    assert {"classifier_accuracy_real", "classifier_accuracy_generated", "gap_points", "goal_met"} <= set(block)
    assert 0.0 <= block["classifier_accuracy_generated"] <= 1.0
    for key in ("vol", "skew"):
        assert set(block[key]) == set(REGIMES)
        assert set(block[key]["crash"]) == {"generated", "real_train", "real_held_out"}
    assert "regimes" not in strict_loads((tmp_path / "wgan_gp.json").read_text())
    assert "regime classifier" in capsys.readouterr().out
