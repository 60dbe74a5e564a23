"""evaluate --ensemble: greedy on the mean of the checkpoints' action probabilities, one ensemble a fold under
--folds, and members that cannot act as one refused in one line."""
import dataclasses
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import strict_loads
from market_fixtures import recording

from clstm_ppo.agent.from_checkpoint import load_agent
from clstm_ppo.backtest.ensemble import walk_ensemble
from clstm_ppo.backtest.policies import agent_policy, ensemble_policy
from clstm_ppo.backtest.walk import walk
from clstm_ppo.cli import run_cli
from clstm_ppo.data.folds import Fold
from clstm_ppo.evaluate import main as evaluate_main
from clstm_ppo.train import main as train_main

FOLDS = (Fold(0, "2001-12-31", "2002-12-31", "2003-12-31"), Fold(1, "2002-12-31", "2003-12-31", "2004-12-31"))
CPU = torch.device("cpu")


def train(root, name: str, fold: Fold, seed: int, *extra: str) -> str:
    """A one-update smoke run on ``fold``'s dates: a model whose greedy actions still depend on its seed."""
    # One thread, as the suite's walks run: a two-thread trainer on two busy cores ran ten times slower, and it
    # left torch on two threads for the walks after it.
    code = run_cli(train_main, ["--config", "smoke", "--checkpoint-dir", str(root), "--run-name", name,
                                "--seed", str(seed), "--total-steps", "256", "--set", "train.num_envs=8",
                                "--set", "launch.threads_per_worker=1",
                                *[x for s in fold.settings() for x in ("--set", s)], *extra])
    assert code == 0
    return str(root / name / "latest.pt")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two folds x two seeds: runs[fold][seed]."""
    root = tmp_path_factory.mktemp("ensemble")
    return [[train(root, f"fold{f.name}_seed{seed}", f, seed) for seed in (0, 1)] for f in FOLDS]


def test_an_ensemble_of_one_checkpoint_walks_as_that_checkpoint(runs, tmp_path):
    cfg, data, model = load_agent(runs[0][0], None, [], CPU)
    alone, together = [], []
    agent = walk("agent", *recording(*agent_policy(model, 1, CPU), alone), data, "test", cfg, CPU)
    ensemble = walk("ensemble", *recording(*ensemble_policy([model], 1, CPU), together), data, "test", cfg, CPU)
    assert len(alone) == len(together) > 200
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(alone, together, strict=True)), "the same actions"
    for field in dataclasses.fields(agent):
        if field.name != "policy":
            assert np.array_equal(getattr(agent, field.name), getattr(ensemble, field.name)), field.name
    report, returns = tmp_path / "one.json", tmp_path / "one.csv"
    assert run_cli(evaluate_main, ["--ensemble", "--checkpoint", runs[0][0], "--json", str(report),
                                   "--returns", str(returns)]) == 0
    daily = pd.read_csv(returns, index_col="date")
    assert list(daily.columns[:2]) == ["agent", "ensemble"]
    assert daily["agent"].equals(daily["ensemble"])
    saved = strict_loads(report.read_text())
    assert saved["policies"]["ensemble"] == saved["policies"]["agent"]


def record_observations(policy, state, seen: list):
    """``policy`` wrapped so each decision's observation (copied) and action are kept."""
    def act(obs, inner):
        action, inner = policy(obs, inner)
        seen.append(([obs.market.clone(), obs.portfolio.clone(), obs.mask.clone(), obs.start.clone()], action))
        return action, inner
    return act, state


def test_an_ensemble_of_two_seeds_acts_on_the_mean_of_their_probabilities(runs):
    members = [load_agent(path, None, [], CPU) for path in runs[0]]
    cfg, data, _ = members[0]
    models = [model for _, _, model in members]
    seen = []
    walk("ensemble", *record_observations(*ensemble_policy(models, 1, CPU), seen), data, "test", cfg, CPU)
    states = [model.initial_state(1, CPU) for model in models]
    disagree = 0
    with torch.no_grad():
        for inputs, action in seen:
            probs = []
            for k, model in enumerate(models):  # each model on its own LSTM state, as the walk carries it
                logits, _, states[k] = model(*(x.unsqueeze(0) for x in inputs), states[k])
                z = logits[0, 0].double().numpy()
                probs.append(np.exp(z - z.max()) / np.exp(z - z.max()).sum())
            assert int(action[0]) == int(np.argmax((probs[0] + probs[1]) / 2))
            disagree += int(np.argmax(probs[0]) != np.argmax(probs[1]))
    assert disagree > 0, "the seeds must disagree somewhere for the mean to decide anything"


class FixedLogits:
    """A stand-in model: the same masked logits, one row per copy, at every decision."""

    def __init__(self, rows: list[list[float]]):
        self.logits = torch.tensor(rows)

    def __call__(self, market, portfolio, mask, start, state):
        return self.logits.unsqueeze(0), None, state

    def initial_state(self, num_envs, device):
        return None


def test_equal_mean_probabilities_go_to_the_first_action_as_argmax_breaks_ties():
    masked = -1e9
    a = FixedLogits([[masked, 1.0, 0.0], [0.0, 5.0, 0.0]])
    b = FixedLogits([[masked, 0.0, 1.0], [0.0, 0.0, 6.0]])  # copy 0: mirrored, so actions 1 and 2 tie
    act, state = ensemble_policy([a, b], 2, CPU)
    obs = SimpleNamespace(market=torch.zeros(2, 1, 1), portfolio=torch.zeros(2, 1), mask=torch.ones(2, 3, dtype=bool),
                          start=torch.zeros(2, dtype=bool))
    action, _ = act(obs, state)
    assert action.tolist() == [1, 2]  # copy 1: 0.4933 + 0.0012 for action 1, 0.0033 + 0.4975 for action 2


def test_folds_take_one_ensemble_a_fold_of_that_folds_seeds_laid_end_to_end(runs, tmp_path):
    report, returns = tmp_path / "folds.json", tmp_path / "folds.csv"
    given = [runs[1][0], runs[0][0], runs[1][1], runs[0][1]]  # folds interleaved: grouped by their split dates
    assert run_cli(evaluate_main, ["--folds", "--ensemble", "--checkpoint", *given, "--json", str(report),
                                   "--returns", str(returns)]) == 0
    saved = strict_loads(report.read_text())
    assert [fold["checkpoints"] for fold in saved["folds"]] == runs, "each fold's seeds in the order given"
    assert list(saved["policies"])[:3] == ["agent_1", "agent_2", "ensemble"]
    daily = pd.read_csv(returns, index_col="date", parse_dates=True)
    expected = []
    for fold, paths in enumerate(runs):  # each fold's ensemble walked here alone, of that fold's models only
        members = [load_agent(path, None, [], CPU) for path in paths]
        cfg, data, _ = members[0]
        alone = walk_ensemble([model for _, _, model in members], data, "test", cfg, CPU)
        symbol = data.symbols[0]
        assert saved["folds"][fold]["policies"]["ensemble"][symbol]["total_return"] == pytest.approx(
            alone.equity[0, -1] / alone.equity[0, 0] - 1, rel=1e-9)
        expected.append(([0.0] if fold else []) + list(alone.daily_returns[0]))  # a later fold's first day: flat
    np.testing.assert_allclose(daily["ensemble"].to_numpy(), np.concatenate(expected), rtol=1e-9, atol=1e-15)


@pytest.fixture(scope="module")
def other_actions(runs, tmp_path_factory):
    """Fold 0's seed 0 again, on a chain without the 50% share target: another action space."""
    return train(tmp_path_factory.mktemp("other"), "targets", FOLDS[0], 0, "--set", "market.stock_targets=[0.0,1.0]")


@pytest.mark.parametrize(("case", "expected"), [
    ("another action space", "has market.stock_targets=[0.0, 1.0] where"),
    ("another fold's split dates", "has data.train_end=2002-12-31 where"),
    ("another action space within a fold", "has market.stock_targets=[0.0, 1.0] where"),
    ("folds of unequal seeds", "give every fold the same seeds"),
])
def test_members_that_cannot_act_as_one_are_refused_in_one_line(runs, other_actions, capsys, case, expected):
    flags = {"another action space": ["--checkpoint", runs[0][0], other_actions],
             "another fold's split dates": ["--checkpoint", runs[0][0], runs[1][0]],
             "another action space within a fold": ["--folds", "--checkpoint", runs[0][0], other_actions,
                                                    *runs[1]],
             "folds of unequal seeds": ["--folds", "--checkpoint", *runs[0], runs[1][0]]}[case]
    assert run_cli(evaluate_main, ["--ensemble", *flags]) == 2
    out = capsys.readouterr()
    assert out.err.startswith("error: --") and expected in out.err and out.err.count("\n") == 1, out.err
    assert "ensemble the seeds of one setup" in out.err or case == "folds of unequal seeds"
    assert out.out == "", "refused before any walk"
