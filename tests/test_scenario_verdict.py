"""The report's verdict follows the goals' thresholds (fixture reports at and just past each one), and the stress
test's warning line appears exactly when a source fails the tail or regime goals."""
import copy

import numpy as np
import pytest

from clstm_ppo.scenarios.verdict import (
    CRASH_VOL_RATIO,
    DISCRIMINATIVE_MAX,
    SAMPLE_SECONDS_MAX,
    TRAIN_SECONDS_MAX,
    drift,
    format_verdict,
    kurtosis_range,
    stress_warning,
    verdict,
)

NAMES = ("model", "garch_t")
HELD = 3.65


def _row(kurtosis=3.5, emd=(0.001, 0.005, 0.01, 0.05), acf_abs=0.3, leverage=0.3, disc=0.1, train=100.0,
         sample=1.0, drift_ok=True, short_acf_abs=0.9, short_leverage=0.9):
    # acf_abs, leverage: of paths as long as the held-out series (the goal's); short_*: of the 252-bar paths
    return {"kurtosis": 20.0, "at_held_out_length": {"kurtosis_per_path_median": kurtosis, "paths": 200,
                                                     "length": 1510, "acf_score": {"r": 0.2, "abs": acf_abs, "sq": 0.3},
                                                     "leverage_score": leverage},
            "emd": dict(zip(("1", "5", "20", "100"), emd, strict=True)),
            "acf_score": {"r": 0.2, "abs": short_acf_abs, "sq": 0.3}, "leverage_score": short_leverage,
            "discriminative_score": disc, "train_seconds": train, "sample_seconds": sample,
            "drift": {"ok": drift_ok, "ratio_min": [0.8], "ratio_max": [1.2], "bars": 1000}}


def _regimes(bull_vol=0.10, crash_vol=0.20, bull_skew=0.2, bear_skew=-0.1, crash_skew=-0.2, gap=5.0):
    return {"vol": {"bull": {"generated": bull_vol}, "crash": {"generated": crash_vol}, "bear": {"generated": 0.15}},
            "skew": {"bull": {"generated": bull_skew}, "bear": {"generated": bear_skew},
                     "crash": {"generated": crash_skew}},
            "gap_points": gap}


def _report(**model):
    regimes = model.pop("regimes", _regimes())
    return {"real_held_out": {"kurtosis": 9.0, "kurtosis_per_series_median": HELD}, "model": _row(**model),
            "garch_t": _row(kurtosis=24.0, emd=(0.0036, 0.0088, 0.0205, 0.0627), acf_abs=0.424, leverage=0.451,
                            disc=0.5),
            "regimes": regimes}


def _passes(report, goal, name="model"):
    return verdict(report, NAMES)[name][goal]["pass"]


def test_a_model_meeting_every_goal_passes_every_goal():
    v = verdict(_report(), NAMES)
    assert all(g["pass"] for g in v["model"].values())
    # GARCH-t is the reference of three goals and has no regimes: those are n/a, not passes
    assert [v["garch_t"][g]["pass"] for g in ("emd", "acf_abs", "leverage", "regimes")] == [None] * 4
    assert v["garch_t"]["tails"]["pass"] is False and v["garch_t"]["discriminative"]["pass"] is False


@pytest.mark.parametrize("kurtosis, ok", [(HELD * 1.3, True), (HELD * 1.3 + 1e-6, False), (HELD * 0.7, True),
                                          (HELD * 0.7 - 1e-6, False), (7.4, False), (-0.14, False)])
def test_tails_within_30_percent_of_the_held_out_kurtosis(kurtosis, ok):
    assert kurtosis_range(HELD) == pytest.approx((HELD * 0.7, HELD * 1.3))
    assert _passes(_report(kurtosis=kurtosis), "tails") is ok


def test_emd_must_be_below_garch_t_at_every_lag():
    assert _passes(_report(emd=(0.0035, 0.0087, 0.0204, 0.0626)), "emd")
    assert not _passes(_report(emd=(0.0035, 0.0087, 0.0204, 0.0627)), "emd")  # equal at lag 100 is not below
    text = verdict(_report(emd=(0.004, 0.0087, 0.03, 0.0626)), NAMES)["model"]["emd"]["text"]
    assert text == "not below GARCH-t at lag 1, 20"


def test_acf_leverage_and_discriminative_thresholds():
    assert _passes(_report(acf_abs=0.4239), "acf_abs") and not _passes(_report(acf_abs=0.424), "acf_abs")
    assert _passes(_report(leverage=0.45), "leverage") and not _passes(_report(leverage=0.451), "leverage")
    # the 252-bar paths' scores do not decide: only paths as long as the held-out history compare with it
    assert _passes(_report(acf_abs=0.4, short_acf_abs=5.0), "acf_abs")
    assert not _passes(_report(acf_abs=0.5, short_acf_abs=0.01, short_leverage=0.01), "acf_abs")
    assert "1510-bar paths" in verdict(_report(), NAMES)["model"]["leverage"]["text"]
    assert _passes(_report(disc=DISCRIMINATIVE_MAX), "discriminative")
    assert not _passes(_report(disc=DISCRIMINATIVE_MAX + 1e-9), "discriminative")


@pytest.mark.parametrize("regimes, ok", [
    (_regimes(crash_vol=0.10 * CRASH_VOL_RATIO), True),
    (_regimes(crash_vol=0.10 * CRASH_VOL_RATIO - 1e-9), False),
    (_regimes(bear_skew=0.2), False),  # bear not more negatively skewed than bull
    (_regimes(crash_skew=0.25), False),
    (_regimes(gap=10.0), True), (_regimes(gap=-10.0), True), (_regimes(gap=10.01), False),
])
def test_regime_goal(regimes, ok):
    assert _passes(_report(regimes=regimes), "regimes") is ok


def test_an_unconditional_model_has_no_regime_verdict():
    report = _report()
    del report["regimes"]
    assert _passes(report, "regimes") is None


def test_budget_and_drift():
    assert _passes(_report(train=TRAIN_SECONDS_MAX, sample=SAMPLE_SECONDS_MAX), "budget")
    assert not _passes(_report(train=TRAIN_SECONDS_MAX + 1), "budget")
    assert not _passes(_report(sample=SAMPLE_SECONDS_MAX + 0.01), "budget")
    # a one-thread fit on a shared CPU: its CPU seconds are what an idle core takes; more CPU than wall
    # (several threads) leaves the wall seconds
    loaded = _report(train=TRAIN_SECONDS_MAX + 20)
    loaded["model"]["train_cpu_seconds"] = 460.0
    assert _passes(loaded, "budget")
    assert "fit 460.0 CPU s" in verdict(loaded, NAMES)["model"]["budget"]["text"]
    loaded["model"]["train_cpu_seconds"] = 2 * TRAIN_SECONDS_MAX
    assert not _passes(loaded, "budget")
    assert not _passes(_report(drift_ok=False), "drift")
    rng = np.random.default_rng(0)
    steady = rng.normal(size=(50, 1000, 2))
    assert drift(steady, np.ones(2))["ok"]
    dying = steady * np.linspace(1, 0, 1000)[None, :, None]  # settles to a constant
    assert not drift(dying, np.ones(2))["ok"]
    exploding = steady * np.linspace(1, 10, 1000)[None, :, None]
    out = drift(exploding, np.ones(2))
    assert not out["ok"] and max(out["ratio_max"]) > 3


def test_verdict_lines():
    report = _report(kurtosis=8.9, disc=0.31)
    lines = format_verdict(verdict(report, NAMES), {"model": "model (cgan)"})
    assert len(lines) == 3 and lines[0].startswith("verdict")
    assert lines[1].startswith("  model (cgan): tails FAIL (kurtosis 8.90 (median of 200 paths of 1510 bars), "
                               "goal 2.55..4.75)")
    assert "discriminative FAIL (0.310" in lines[1] and "emd PASS" in lines[1] and "regimes PASS" in lines[1]
    assert "  garch_t: tails FAIL" in lines[2] and "emd n/a;" in lines[2]


class _Paths:
    """A source whose returns are drawn by ``draw(rng, paths, length)``: column 1 of (N, L, 2)."""

    feature_names = ("gap", "ret")

    def __init__(self, draw):
        self.draw = draw

    def sample_features(self, paths, length, regime=None, seed=0, start="end"):
        out = np.zeros((paths, length, 2))
        out[..., 1] = self.draw(np.random.default_rng(seed), paths, length)
        return out


def test_the_stress_warning_names_the_failed_goals_and_only_then():
    held = np.random.default_rng(1).standard_t(5, size=(1, 3000)) * 0.01
    # each path a reshuffle of the held-out returns: every path as long as them has their kurtosis exactly
    same = _Paths(lambda rng, n, length: np.stack([rng.permutation(held[0])[:length] for _ in range(n)]))
    garch = _Paths(lambda rng, n, length: rng.standard_t(3, size=(n, length)) * 0.02)  # wider: every EMD larger
    assert stress_warning(same, "gen", 1, held, garch, None) is None
    thin = _Paths(lambda rng, n, length: rng.normal(size=(n, length)) * 0.01)
    line = stress_warning(thin, "cgan (g.pt)", 1, held, garch, None)
    assert line.startswith("warning: cgan (g.pt) fails the scenario goals (tails: kurtosis ") and "\n" not in line
    bad = _regimes(crash_vol=0.11)
    line = stress_warning(same, "gen", 1, held, garch, copy.deepcopy(bad))
    assert "(regimes: crash/bull vol 1.1x" in line and "tails:" not in line
