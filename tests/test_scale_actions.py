"""agent.actions scale: the agent picks a multiple of one fixed rule's order (clstm_ppo/env/scaled.py,
clstm_ppo/backtest/scaled_rules.py). At 1x everywhere it walks exactly its rule, at 0x it holds cash, and its
choice matters only where the rule places an order."""
import dataclasses

import numpy as np
import pytest
import torch

from clstm_ppo.backtest.conditional import walk_gated
from clstm_ppo.backtest.gates import gate_series
from clstm_ppo.backtest.rules import FixedRule, rules_policy
from clstm_ppo.backtest.scaled_rules import rule_named, scaled_rule
from clstm_ppo.backtest.walk import walk, walk_env
from clstm_ppo.config import ConfigError, load_config
from clstm_ppo.env import ActionSpace
from clstm_ppo.market.observed import observed_market_data

SMALL = ["data.source=planted", "data.planted.years=6", "data.planted.train_years=2", "data.planted.val_years=1",
         "agent.actions=scale"]
PUT_SALE = "sell put 0.95 x 30d, every free slot"
GATED = "sell put 0.95 x 30d, one at a time, while the implied vol's z-score is above 0"
BUY_WRITE = "underlying to 100% + sell call 1.05 x 30d, every free slot"


@pytest.fixture(scope="module")
def setup():
    cfg = load_config(None, SMALL)
    return cfg, observed_market_data(cfg)


def constant(choice: int):
    """A policy choosing index ``choice`` wherever the mask offers it, else the one valid choice (1x)."""
    def act(obs, state):
        wanted = torch.full((obs.mask.shape[0],), choice, dtype=torch.long)
        return torch.where(obs.mask[:, choice], wanted, obs.mask.long().argmax(-1)), state
    return act, None


def with_rule(cfg, words: str):
    cfg = dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, scale_rule=words))
    return cfg


@pytest.mark.parametrize("words", [PUT_SALE, GATED, BUY_WRITE])
def test_one_times_everywhere_walks_exactly_its_rule(setup, words):
    cfg, data = setup
    cfg = with_rule(cfg, words)
    actions = ActionSpace.from_config(cfg.market)
    gated = rule_named(words, actions)
    rule_walk = walk_gated([gated], gate_series(data, cfg.market), data, "validation", cfg, "cpu")[words]
    scaled = scaled_rule(cfg, data, "cpu")
    agent_walk = walk("agent", *constant(scaled.one), data, "validation", cfg, "cpu", scaled)
    assert rule_walk.closed.sum() > 5  # the rule trades here
    np.testing.assert_array_equal(agent_walk.equity, rule_walk.equity)
    np.testing.assert_array_equal(agent_walk.traded, rule_walk.traded)


def test_zero_times_everywhere_holds_cash_and_half_sells_half(setup):
    cfg, data = setup
    cfg = with_rule(cfg, PUT_SALE)
    slots = cfg.env.max_positions
    scaled = scaled_rule(cfg, data, "cpu")
    cash = walk("cash", *rules_policy([FixedRule(None, None)], ActionSpace.from_config(cfg.market), 1, slots, "cpu"),
                data, "validation", cfg, "cpu")
    zero = walk("zero", *constant(scaled.multiples.index(0.0)), data, "validation", cfg, "cpu", scaled)
    np.testing.assert_array_equal(zero.equity, cash.equity)
    assert zero.closed.sum() == 0 and zero.traded.sum() == 0
    # The first order at 0.5x is half the contracts of the same order at 1x, on the same bar of the same account.
    first = {}
    for k in (0.5, 1.0):
        env = walk_env(data, "validation", cfg, "cpu", scaled=scaled)
        env.reset(starts=torch.full((1,), env.first_bar, dtype=torch.long))
        env.step(torch.tensor([scaled.multiples.index(k)]))
        first[k] = float(env.contracts[:, 0].sum())
    assert first[1.0] > 0
    assert first[0.5] == pytest.approx(0.5 * first[1.0], rel=1e-12)


def test_the_choice_is_offered_only_where_the_rule_places_an_order(setup):
    cfg, data = setup
    cfg = with_rule(cfg, "sell put 0.95 x 30d, one at a time")
    scaled = scaled_rule(cfg, data, "cpu")
    env = walk_env(data, "validation", cfg, "cpu", scaled=scaled)
    obs = env.reset(starts=torch.full((1,), env.first_bar, dtype=torch.long))
    assert env.actions.n == 4 and env.actions.describe(scaled.one) == "1x sell put 0.95 x 30d, one at a time"
    assert obs.mask[0].all()  # an empty book: the rule sells, every multiple is offered
    obs = env.step(torch.tensor([scaled.one])).obs
    assert env.active[:, 0].sum() == 1  # sold one put; one at a time, the rule waits for it to expire
    assert obs.mask[0].tolist() == [False, False, True, False]  # 1x alone: nothing to scale


def test_a_gated_rule_places_nothing_while_its_gate_is_shut(setup):
    cfg, data = setup
    cfg = with_rule(cfg, GATED)
    scaled = scaled_rule(cfg, data, "cpu")
    shut = ~gate_series(data, cfg.market)["zscore_positive"]
    env = walk_env(data, "validation", cfg, "cpu", scaled=scaled)
    obs = env.reset(starts=torch.full((1,), env.first_bar, dtype=torch.long))
    offered = []
    for _ in range(120):
        t = int(env.t[0])
        offered.append((bool(shut[0, t]), bool(obs.mask[0].sum() > 1)))
        obs = env.step(torch.tensor([scaled.one])).obs
    assert not any(is_shut and free for is_shut, free in offered)  # shut: 1x alone
    assert any(free for _, free in offered)


def test_words_that_name_no_rule_and_multiples_without_one_are_refused_in_one_line(setup):
    cfg, data = setup
    with pytest.raises(ConfigError, match="is not a rule of this chain") as err:
        scaled_rule(with_rule(cfg, "sell put 0.90 x 30d, every free slot"), data, "cpu")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="must hold 1"):
        load_config(None, [*SMALL, "agent.scale_multiples=[0, 0.5, 2]"])
    with pytest.raises(ConfigError, match="repeat"):
        load_config(None, [*SMALL, "agent.scale_multiples=[0, 1, 1]"])
    assert scaled_rule(load_config(None, [*SMALL[:-1], "agent.actions=contracts"]), data, "cpu") is None  # no rule


@pytest.mark.xdist_group("inductor")
def test_the_compiled_scale_step_agrees_with_eager(setup):
    """The step under scale compiles to one graph (the rule's order read from the chain's mask inside it) and each
    compiled step agrees with the eager one from the same state, through every multiple and episode restarts."""
    from env_trajectory import random_valid

    from clstm_ppo.env import BatchedOptionsEnv
    from clstm_ppo.env import step as pure

    cfg, data = setup
    cfg = with_rule(cfg, "underlying to 50% + sell put 0.95 x 30d, every free slot")
    env_cfg = dataclasses.replace(cfg.env, dtype="float64", episode_length=30)
    env = BatchedOptionsEnv(data, "train", cfg.market, env_cfg, 8, seed=2, records=False,
                            scaled=scaled_rule(cfg, data, "cpu"))
    env.reset()
    compiled = pure.compiled_step(env.spec)
    state, gen = env.state, torch.Generator().manual_seed(1)
    for _ in range(40):
        choice = random_valid(state.mask, gen)
        fast, slow = compiled(state, choice), pure.step(env.spec, state, choice)
        for name in ("cash", "equity", "shares", "contracts"):
            torch.testing.assert_close(getattr(fast.state, name), getattr(slow.state, name), rtol=1e-9, atol=1e-6)
        for name in ("t", "active", "short", "mask"):
            assert torch.equal(getattr(fast.state, name), getattr(slow.state, name)), name
        state = slow.state
    assert slow.state.stats["closed"].sum() + slow.state.finished[0].sum() > 0


@pytest.mark.parametrize("compile", ["off", pytest.param("on", marks=pytest.mark.xdist_group("inductor"))])
def test_a_scale_agent_trains_from_its_rule_resumes_exactly_evaluates_and_predicts(tmp_path, capsys, compile):
    """The smoke run as a scale agent cloned from its rule: the rule is the training years' best, kept in the run's
    settings; a resumed run equals an uninterrupted one to the bit (eager, and the compiled env step and update; no
    fading prior penalty, whose schedule follows each launch's budget); evaluate and predict rebuild the rule from
    the checkpoint alone."""
    import json

    from conftest import make_bars, strict_loads
    from smoke_training import train

    from clstm_ppo.cli import run_cli
    from clstm_ppo.evaluate import main as evaluate_main
    from clstm_ppo.predict import main as predict_main
    from clstm_ppo.run_files.run_state import load_checkpoint

    common = ["--set", "agent.actions=scale", "--set", "pretrain.enabled=true", "--set", "pretrain.method=rule",
              "--set", "prior.kl=0", "--set", "prior.rollouts=2", "--set", "ppo.lr_schedule=constant",
              "--set", f"launch.compile_loop={compile}", "--set", "train.eval_every=2"]
    batch = 16 * 32
    assert train(tmp_path / "a", "--total-steps", str(4 * batch), *common) == 0
    out = capsys.readouterr().out
    run = tmp_path / "a" / "synthetic-smoke"
    saved = load_checkpoint(run / "latest.pt").config["agent"]
    assert saved["actions"] == "scale" and saved["scale_rule"]  # the training years' pick, in words
    assert f"prior: 1x {saved['scale_rule']}" in out
    assert train(tmp_path / "b", "--total-steps", str(2 * batch), *common) == 0
    assert train(tmp_path / "b", "--total-steps", str(4 * batch), "--resume-from", "latest", *common) == 0
    a = load_checkpoint(run / "latest.pt").model
    b = load_checkpoint(tmp_path / "b" / "synthetic-smoke" / "latest.pt").model
    for name in a:
        assert torch.equal(a[name], b[name]), name
    if compile == "on":
        return
    capsys.readouterr()
    report = tmp_path / "report.json"
    assert run_cli(evaluate_main, ["--checkpoint", str(run / "latest.pt"), "--split", "test", "--json",
                                   str(report)]) == 0
    walked = json.loads(report.read_text())
    assert {"agent", "best_rule", "best_conditional_rule"} <= set(walked["policies"])
    bars = tmp_path / "SPY.csv"
    make_bars(600, seed=7).to_csv(bars, index=False)
    capsys.readouterr()
    assert run_cli(predict_main, ["--checkpoint", str(run / "latest.pt"), "--data", str(bars), "--json"]) == 0
    decision = strict_loads(capsys.readouterr().out.strip().splitlines()[-1])["decisions"][0]
    assert len(decision["valid"]) == 4 and decision["valid"][decision["action"]]
    assert decision["action_name"].endswith(saved["scale_rule"])
