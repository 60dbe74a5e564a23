"""best_conditional_rule: the fixed rules gated on the option market's state, each gate causal, the pick made on the
validation years alone (clstm_ppo/backtest/gates.py, clstm_ppo/backtest/conditional.py)."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from clstm_ppo.backtest.conditional import conditional_family, pick_conditional_rule, walk_gated
from clstm_ppo.backtest.gates import ALWAYS, GATES, OPPOSITE, STATES, gate_series
from clstm_ppo.backtest.rules import FixedRule, GatedRule, pick_rule, rule_family, rules_policy
from clstm_ppo.backtest.walk import walk
from clstm_ppo.config import load_config
from clstm_ppo.env import ActionSpace
from clstm_ppo.market.observed import OPTION_FEATURE_NAMES, observed_market_data, option_feature_values

# A short planted market: a warm-up year, two training years, one validation year, two test years.
SMALL = ["data.source=planted", "data.planted.years=6", "data.planted.train_years=2", "data.planted.val_years=1",
         "env.initial_cash=1000000"]


@pytest.fixture(scope="module")
def setup():
    cfg = load_config(None, SMALL)
    return cfg, observed_market_data(cfg)


def test_the_family_is_every_unconditional_rule_then_every_option_rule_under_each_other_gate():
    actions = ActionSpace.from_config(load_config(None, SMALL).market)
    family, rules = conditional_family(actions), rule_family(actions)
    with_options = [r for r in rules if r.order is not None]
    assert [g.rule for g in family[:len(rules)]] == rules and all(g.gate == ALWAYS for g in family[:len(rules)])
    assert len(family) == len(rules) + (len(GATES) - 1) * len(with_options) == 147 + 6 * 144
    names = [g.describe(actions) for g in family]
    assert len(set(names)) == len(names)
    assert names[-1].endswith("while the implied vol's z-score is at or below 0")


def test_each_gate_is_its_state_of_the_observed_features_and_each_opposite_its_complement(setup):
    cfg, data = setup
    gates = gate_series(data, cfg.market)
    features = option_feature_values(data, cfg.market)
    iv = features[0, :, OPTION_FEATURE_NAMES.index("iv")]
    window = int(data.periods_per_year)
    for t in (30, 400, len(iv) - 1):  # an independent median of the trailing year, bar by bar
        assert gates["iv_above_median"][0, t] == (iv[t] > np.median(iv[max(0, t - window + 1):t + 1]))
    assert not gates["iv_above_median"][0, :19].any()  # no median before 20 bars
    assert np.array_equal(gates["vrp_positive"][0], features[0, :, OPTION_FEATURE_NAMES.index("iv_premium")] > 0)
    assert np.array_equal(gates["zscore_positive"][0], features[0, :, OPTION_FEATURE_NAMES.index("iv_zscore")] > 0)
    for state in STATES:
        assert np.array_equal(gates[OPPOSITE[state]], ~gates[state])
        assert 0.2 < gates[state].mean() < 0.8  # each gate opens and shuts on this market
    assert gates[ALWAYS].all()


def test_every_gate_reads_only_bars_up_to_its_own(setup):
    cfg, data = setup
    before = gate_series(data, cfg.market)
    t = data.splits["validation"][0] + 40
    rng = np.random.default_rng(3)
    bars = {k: v.copy() for k, v in data.bars.items()}
    raw = data.raw_features.copy()
    bars["iv"][:, t + 1:] *= rng.uniform(0.5, 2.0, size=bars["iv"][:, t + 1:].shape)  # another future
    raw[:, t + 1:, data.feature_names.index("realized_vol")] *= 3.0
    after = gate_series(dataclasses.replace(data, bars=bars, raw_features=raw), cfg.market)
    for name in GATES:
        assert np.array_equal(before[name][:, :t + 1], after[name][:, :t + 1]), name
    assert any(not np.array_equal(before[n][:, t + 1:], after[n][:, t + 1:]) for n in STATES)  # the change shows


def test_a_rule_gated_always_or_never_open_walks_as_the_rule_or_its_shares_alone(setup):
    cfg, data = setup
    actions = ActionSpace.from_config(cfg.market)
    rule = FixedRule(actions.stock_targets.index(0.5), actions.sell(False, 0, 0), every_slot=True)
    shape = data.bars["close"].shape
    gates = {"open": np.ones(shape, dtype=bool), "shut": np.zeros(shape, dtype=bool)}
    gated = walk_gated([GatedRule(rule, "open"), GatedRule(rule, "shut")], gates, data, "validation", cfg, "cpu")
    slots = cfg.env.max_positions
    plain = walk("rule", *rules_policy([rule], actions, 1, slots, "cpu"), data, "validation", cfg, "cpu")
    shares = walk("shares", *rules_policy([FixedRule(rule.stock, None)], actions, 1, slots, "cpu"), data,
                  "validation", cfg, "cpu")
    opened, shut = gated.values()
    assert np.array_equal(opened.equity, plain.equity) and np.array_equal(shut.equity, shares.equity)
    assert plain.closed.sum() > 0 and shut.closed.sum() == 0


def test_the_conditional_pick_reads_only_the_validation_years_and_is_never_below_best_rule(setup):
    cfg, data = setup
    pick = pick_conditional_rule(data, cfg, "cpu")
    start = data.splits["test"][0]
    rng = np.random.default_rng(7)
    bars = {k: v.copy() for k, v in data.bars.items()}
    scale = np.exp(np.cumsum(rng.normal(0, 0.03, size=bars["close"][:, start:].shape), axis=1))
    for k in ("open", "high", "low", "close"):
        bars[k][:, start:] *= scale  # other test years
    bars["iv"][:, start:] *= 2.0
    moved = dataclasses.replace(data, bars=bars)
    again = pick_conditional_rule(moved, cfg, "cpu")
    assert (again.name, again.score) == (pick.name, pick.score)
    assert pick.label == "best_conditional_rule" and pick.tried == 147 + 6 * 144
    best = pick_rule(data, cfg, "cpu")
    assert pick.score >= best.score  # the family holds every unconditional rule
    assert 0.0 <= pick.deflated["deflated_sharpe"] <= 1.0 and pick.deflated["trials"] == pick.tried
    assert pick.as_dict()["tried"] == pick.tried and "deflated_sharpe" in pick.as_dict()
    assert pd.Timestamp(pick.walked.split("..")[1]) == data.split_dates("validation")[1]


def test_a_checkpoint_evaluates_as_before_with_best_conditional_rule_beside_best_rule(tmp_path, capsys):
    """Adding the benchmark changes no other policy's walk: the agent and best_rule walk as they walk alone, and the
    report names both picks, each with the rules it searched."""
    import json

    import torch

    from clstm_ppo.agent.from_checkpoint import load_agent
    from clstm_ppo.backtest.policies import agent_policy
    from clstm_ppo.backtest.report import underlying_metrics
    from clstm_ppo.backtest.scaled_rules import scaled_rule
    from clstm_ppo.cli import run_cli
    from clstm_ppo.evaluate import main as evaluate
    from clstm_ppo.train import main as train

    assert run_cli(train, ["--config", "smoke", "--checkpoint-dir", str(tmp_path), "--total-steps", "512",
                           "--set", "train.num_envs=16"]) == 0
    path = tmp_path / "synthetic-smoke" / "latest.pt"
    capsys.readouterr()
    assert run_cli(evaluate, ["--checkpoint", str(path), "--split", "validation", "--json",
                              str(tmp_path / "report.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("best_rule: ") and lines[2].startswith("best_conditional_rule: ")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["best_rule"]["tried"] == 147 and report["best_conditional_rule"]["tried"] == 147 + 6 * 144
    assert "best_conditional_rule" in report["policies"]
    cfg, data, model = load_agent(str(path), None, [], torch.device("cpu"))
    alone = {"agent": walk("agent", *agent_policy(model, len(data.symbols), torch.device("cpu")), data,
                           "validation", cfg, "cpu", scaled_rule(cfg, data, "cpu"))}
    best = pick_rule(data, cfg, "cpu")
    alone["best_rule"] = walk("best_rule", *rules_policy([best.rule], ActionSpace.from_config(cfg.market),
                                                         len(data.symbols), cfg.env.max_positions, "cpu"),
                              data, "validation", cfg, "cpu")
    for name, result in alone.items():
        for s, symbol in enumerate(result.symbols):
            mine = underlying_metrics(result, s)
            assert report["policies"][name][symbol]["sharpe_excess"] == pytest.approx(mine["sharpe_excess"], abs=1e-12)
            assert report["policies"][name][symbol]["total_return"] == pytest.approx(mine["total_return"], abs=1e-12)
