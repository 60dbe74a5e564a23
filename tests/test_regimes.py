"""A fixed rule per volatility regime (clstm_lab.studies.regime_policies): regimes cut on training years only, each
regime's Sharpe as plain numpy computes it, and the switching policy acting bar by bar as its regime's rule."""
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import strict_loads
from test_rules import ACTIONS, CFG, RULES, SLOTS, reference_rule, same_walk, sharpe_over_bill

from clstm_lab.studies.regime_policies import (
    MIN_DAYS,
    pick_pair_walked,
    pick_per_regime,
    placebo_regimes,
    regime_sharpes,
    signal_regimes,
    signal_values,
)
from clstm_lab.studies.regime_rules import fold_configs, regime_study
from clstm_ppo.backtest.conditional import switching_policy
from clstm_ppo.backtest.report import underlying_metrics
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.rules import pick_rule, rules_policy
from clstm_ppo.backtest.walk import walk, walk_batched
from clstm_ppo.config import DataConfig, SyntheticConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.data.calendar import detect_clock
from clstm_ppo.tables import strict_json

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "studies" / "regime_rules.py"


@pytest.fixture(scope="module")
def market():
    return build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=900, n_underlyings=2)))


def with_iv(market, iv: np.ndarray):
    return type(market)(**{**market.__dict__, "bars": {**market.bars, "iv": iv}})


def test_regimes_are_cut_at_training_quantiles_and_no_later_bar_moves_them(market):
    rng = np.random.default_rng(0)  # the synthetic market's own vol moves in steps: a continuous one for the shares
    market = with_iv(market, 0.2 * np.exp(np.cumsum(rng.normal(0, 0.05, market.bars["iv"].shape), axis=1)))
    regime = signal_regimes(market, 3)
    start, end = market.splits["train"]
    for s in range(2):
        iv = market.bars["iv"][s]
        low, high = np.quantile(iv[start:end], [1 / 3, 2 / 3])
        expected = np.where(iv <= low, 0, np.where(iv <= high, 1, 2))  # plain thresholds, bar by bar
        assert np.array_equal(regime[s], expected)
        assert np.bincount(regime[s, start:end], minlength=3) / (end - start) == pytest.approx([1 / 3] * 3, abs=0.01)
    later = market.bars["iv"].copy()
    later[:, end:] *= 3.0  # every bar after the training years
    assert np.array_equal(signal_regimes(with_iv(market, later), 3)[:, :end], regime[:, :end])
    ties = signal_regimes(with_iv(market, np.full_like(later, 0.2)), 2)
    assert (ties == 0).all(), "a bar at a cut joins the calmer side"


def test_bad_inputs_say_what_is_wrong(market):
    with pytest.raises(ValueError, match="at least 2"):
        signal_regimes(market, 1)
    without = {k: v for k, v in market.bars.items() if k != "iv"}
    with pytest.raises(ValueError, match="one of iv, vrp, log_return, .*turbulence, not 'close'"):
        signal_regimes(market, 2, signal="close")
    for signal in ("iv", "vrp"):
        with pytest.raises(ValueError, match=f"by {signal} need an iv column"):
            signal_regimes(type(market)(**{**market.__dict__, "bars": without}), 2, signal=signal)


def test_a_premium_or_a_feature_signal_is_what_plain_pandas_computes_from_past_closes(market):
    """vrp is implied less realized volatility; a feature signal is the agents' raw feature: both from closes up to
    the bar's own, so the regimes before a split never read a bar after it."""
    cfg = DataConfig()
    for s in range(2):
        close = pd.Series(market.bars["close"][s])
        realized = np.log(close).diff().rolling(cfg.vol_window).std() * math.sqrt(252)  # daily weekday bars
        trend = close / close.rolling(30).mean() - 1.0
        warm = slice(cfg.vol_window + 30, None)  # the market's first bar follows the indicators' warm-up
        np.testing.assert_allclose(signal_values(market, "vrp")[s][warm],
                                   (market.bars["iv"][s] - realized.to_numpy())[warm], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(signal_values(market, "sma_ratio_30")[s][warm], trend.to_numpy()[warm], rtol=1e-9)
    regime = signal_regimes(market, 2, signal="sma_ratio_30")
    start, end = market.splits["train"]
    median = np.median(signal_values(market, "sma_ratio_30")[:, start:end], axis=1)
    assert np.array_equal(regime, (signal_values(market, "sma_ratio_30") > median[:, None]).astype(int))


def test_a_placebo_is_random_in_equal_shares_and_repeatable(market):
    a, b = placebo_regimes(market, 2, seed=0), placebo_regimes(market, 2, seed=1)
    assert np.array_equal(a, placebo_regimes(market, 2, seed=0)) and not np.array_equal(a, b)
    assert a.mean() == pytest.approx(0.5, abs=0.05)


def toy_walk(equity: np.ndarray, dates: pd.DatetimeIndex, rate: float) -> WalkResult:
    s = len(equity)
    return WalkResult("toy", [f"S{i}" for i in range(s)], dates, equity, np.full(equity.shape, rate),
                      np.zeros(s), np.zeros(s), np.zeros(s), np.zeros(s), np.zeros((s, 1)), 0.5, detect_clock(dates))


def test_each_regimes_sharpe_is_over_the_bill_on_the_days_that_start_in_it(market):
    rng = np.random.default_rng(0)
    dates = market.dates[100:400]
    equity = 1e5 * np.cumprod(1 + rng.normal(3e-4, 1e-2, size=(2, len(dates))), axis=1)
    walked = toy_walk(equity, dates, 0.02)
    regime = placebo_regimes(market, 2, seed=3)
    got = regime_sharpes(walked, market, regime, 2)
    per_symbol = []
    for s in range(2):  # a plain loop: each day's return, minus the bill's over its calendar gap, by its first bar
        days = {0: [], 1: []}
        for i in range(len(dates) - 1):
            gap = (dates[i + 1] - dates[i]).days
            excess = equity[s, i + 1] / equity[s, i] - 1 - (math.exp(0.02 * gap / 365) - 1)
            days[int(regime[s, 100 + i])].append(excess)
        per_symbol.append([np.mean(d) / np.std(d, ddof=1) * math.sqrt(252) for d in days.values()])
    assert got == pytest.approx(np.mean(per_symbol, axis=0), rel=1e-9)
    short = np.ones_like(regime)
    short[:, 100:100 + MIN_DAYS - 1] = 0  # regime 0 holds too few days to score
    assert np.isnan(regime_sharpes(walked, market, short, 2)[0])


def test_each_regime_picks_its_best_rule_and_a_short_regime_keeps_the_fallback(market):
    dates = market.dates[100:400]
    regime = np.zeros_like(market.bars["close"], dtype=int)
    regime[:, 250:] = 1
    rng = np.random.default_rng(1)
    base = rng.normal(0, 1e-2, size=(2, len(dates)))
    good_early, good_late = base.copy(), base.copy()
    good_early[:, :150] += 3e-3  # strong on the days of regime 0 (bars 100..249)
    good_late[:, 150:] += 3e-3  # strong on regime 1's
    walks = {name: toy_walk(1e5 * np.cumprod(1 + r, axis=1), dates, 0.0)
             for name, r in (("flat", base), ("early", good_early), ("late", good_late))}
    assert pick_per_regime(walks, market, regime, 2, fallback=0) == [1, 2]
    regime[:, :] = 1
    assert pick_per_regime(walks, market, regime, 2, fallback=0) == [0, 2]


def test_the_same_rule_in_every_regime_walks_as_that_rule(market):
    label = placebo_regimes(market, 2, seed=0)
    policy = switching_policy(RULES, [[1, 1], [3, 3]], [label], [0, 0], ACTIONS, 2, SLOTS, "cpu")
    walks = walk_batched(["a", "b"], *policy, market, "validation", CFG, "cpu")
    for name, rule in (("a", RULES[1]), ("b", RULES[3])):
        alone = walk(name, *rules_policy([rule], ACTIONS, 2, SLOTS, "cpu"), market, "validation", CFG, "cpu")
        assert same_walk(alone, walks[name])


def test_a_switching_copy_acts_at_each_bar_as_its_regimes_rule(market):
    """Against a plain per-copy loop that asks the two rules' reference policies and keeps the one of the bar's
    regime (the bar's parity here, so the rules alternate and positions of both stay open)."""
    label = (np.arange(market.bars["close"].shape[1]) % 2)[None].repeat(2, axis=0)
    first, second = RULES[0], RULES[3]  # sell calls into every free slot | sell puts into every free slot
    act_first, act_second = reference_rule(first)[0], reference_rule(second)[0]
    n_bars = market.bars["close"].shape[1]

    def switching(obs, state):
        a, b = act_first(obs, None)[0], act_second(obs, None)[0]
        odd = torch.as_tensor(label.reshape(-1))[obs.row] == 1
        assert (obs.row // n_bars == torch.arange(2)).all()  # copy s walks underlying s: row = s * T + t
        return torch.where(odd, b, a), state

    vectorised = walk("switch", *switching_policy(RULES, [[0, 3]], [label], [0], ACTIONS, 2, SLOTS, "cpu"), market,
                      "validation", CFG, "cpu")
    assert same_walk(vectorised, walk("switch", switching, None, market, "validation", CFG, "cpu"))
    calls_only = walk("calls", *rules_policy([first], ACTIONS, 2, SLOTS, "cpu"), market, "validation", CFG, "cpu")
    assert not np.array_equal(vectorised.equity, calls_only.equity)


def test_the_study_walks_best_rule_as_evaluate_would_and_counts_its_placebos():
    """The study (scripts/studies/regime_rules.py) on the embedded S&P 500 as one fold: its best_rule is pick_rule's
    for that fold, and the test Sharpe it reports for it is that rule walked alone over the test years."""
    (row,) = strict_loads(strict_json(regime_study("sp500", folds=1, placebos=1, pick="days")))
    cfg = fold_configs("sp500", 1)[0]
    data = build_market_data(cfg.data)
    pick = pick_rule(data, cfg, "cpu")
    start, end = data.split_dates("test")
    assert row["best_rule"] == pick.name and row["test_years"] == f"{start.year}..{end.year}" and end.year == 2018
    alone = walk("best_rule", *rules_policy([pick.rule], ACTIONS, 1, cfg.env.max_positions, "cpu"), data, "test", cfg,
                 "cpu")
    assert row["test_best_rule"] == pytest.approx(underlying_metrics(alone, 0)["sharpe_excess"], rel=1e-12)
    assert 0 <= row["test_placebos_at_or_above_signal"] <= 1 and 0 <= row["test_placebos_above_best"] <= 1
    assert len(row["signal_rules"].split(" | ")) == 2


def test_the_study_refuses_data_without_enough_years():
    with pytest.raises(ValueError, match="fold"):
        regime_study("sp500", folds=30)


def test_the_walked_pick_is_the_best_pair_walked_one_by_one(market):
    label = (np.arange(market.bars["close"].shape[1]) // 40 % 2)[None].repeat(2, axis=0)  # 40-bar spells
    candidates = [0, 2, 3]
    pair = pick_pair_walked(RULES, candidates, label, market, CFG, "cpu")
    scores = {}
    for i in candidates:
        for j in candidates:
            alone = walk("pair", *switching_policy(RULES, [[i, j]], [label], [0], ACTIONS, 2, SLOTS, "cpu"), market,
                         "validation", CFG, "cpu")
            scores[(i, j)] = np.mean([sharpe_over_bill(alone, s) for s in (0, 1)])
    assert tuple(pair) == max(scores, key=scores.get)
    assert len(set(np.round(list(scores.values()), 9))) > 3, "the pairs walk differently"


def test_the_walked_pick_refuses_more_than_two_regimes_in_one_line():
    """The command as a user runs it: exit status 2 and one line that names the way out."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--regimes", "3"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: --pick walked walks every pair of rules, so 2 regimes only; use --pick days "
                                   "for 3")
