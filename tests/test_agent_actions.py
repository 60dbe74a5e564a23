"""clstm_lab.studies.agent_actions (scripts/studies/agent_actions.py): a checkpoint's greedy walk described by what
it chose and how sure it was."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import strict_loads

from clstm_lab.studies.agent_actions import action_census, closest_rule
from clstm_ppo.agent.from_checkpoint import load_agent
from clstm_ppo.backtest.policies import agent_policy
from clstm_ppo.backtest.report import underlying_metrics
from clstm_ppo.backtest.rules import FixedRule, rule_family, rules_policy
from clstm_ppo.backtest.scaled_rules import scaled_rule
from clstm_ppo.backtest.walk import walk, walk_batched
from clstm_ppo.cli import run_cli
from clstm_ppo.env import ActionSpace
from clstm_ppo.tables import strict_json
from clstm_ppo.train import main as train_main

ROOT = Path(__file__).resolve().parents[1]


def trained(root: Path, actions: str) -> Path:
    """A smoke run's last checkpoint, its agent choosing ``actions`` (contracts or scale)."""
    assert run_cli(train_main, ["--config", "smoke", "--checkpoint-dir", str(root), "--total-steps", "4096",
                                "--set", f"agent.actions={actions}"]) == 0
    return root / "synthetic-smoke" / "latest.pt"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("runs"), "contracts")


def census(*paths, split: str = "test", overrides: tuple[str, ...] = ()) -> dict:
    """What the command's --json prints for ``paths``, read back as strict JSON."""
    return strict_loads(strict_json(action_census([str(p) for p in paths], split, list(overrides),
                                                  torch.device("cpu"))))


def test_the_census_walks_as_evaluate_does_and_counts_every_decision(checkpoint):
    """The walk is evaluate's greedy walk (same return); one checkpoint named twice is one walk; the greedy
    action's probability is never below an even split of the valid actions."""
    out = census(checkpoint, checkpoint, split="validation")
    assert out["distinct_walks"] == 1 and out["largest_group"] == 2
    row = out["rows"][0]
    cfg, data, model = load_agent(str(checkpoint), None, [], torch.device("cpu"))
    policy, state = agent_policy(model, len(data.symbols), torch.device("cpu"))
    reference = walk("agent", policy, state, data, "validation", cfg, "cpu")
    assert row["return"] == pytest.approx(underlying_metrics(reference, 0)["total_return"], rel=1e-12)
    assert 0 < sum(row["top_actions"].values()) <= 1 + 1e-12
    assert list(row["top_actions"].values()) == sorted(row["top_actions"].values(), reverse=True)
    assert row["p_uniform"] <= row["p_greedy"] <= 1 and 0 <= row["sure"] <= 1


def test_the_closest_rule_is_named_with_its_correlation_and_a_rule_is_closest_to_itself(checkpoint):
    row = census(checkpoint)["rows"][0]
    cfg, data, model = load_agent(str(checkpoint), None, [], torch.device("cpu"))
    actions = ActionSpace.from_config(cfg.market)
    family = {rule.describe(actions): rule for rule in rule_family(actions)}
    assert row["closest_rule"] in family and -1 <= row["rule_corr"] <= 1 + 1e-12
    # the named rule walked alone: its returns correlate with the agent's walk as reported
    policy, state = agent_policy(model, len(data.symbols), torch.device("cpu"))
    agent = walk("agent", policy, state, data, "test", cfg, "cpu").daily_returns.ravel()
    alone = walk("rule", *rules_policy([family[row["closest_rule"]]], actions, len(data.symbols),
                                       cfg.env.max_positions, "cpu"), data, "test", cfg, "cpu")
    assert row["rule_corr"] == pytest.approx(np.corrcoef(agent, alone.daily_returns.ravel())[0, 1], rel=1e-9)
    # a walk that is a rule finds that rule (or one that walks the same days), at correlation 1
    rules = [FixedRule(None, actions.sell(True, 2, 0)), FixedRule(None, actions.buy(False, 0, 1), False),
             FixedRule(len(actions.stock_targets) - 1, None)]
    names = [rule.describe(actions) for rule in rules]
    walks = walk_batched(names, *rules_policy(rules, actions, len(data.symbols), cfg.env.max_positions, "cpu"),
                         data, "test", cfg, "cpu")
    for name in names:
        assert closest_rule(walks[name], walks) == (name, pytest.approx(1.0))


def test_another_market_walks_the_same_weights_differently(checkpoint):
    """--set reaches the walk's market: the smoke agent trades options, and off the tick grid it walks otherwise."""
    base = census(checkpoint)["rows"][0]
    off_grid = census(checkpoint, overrides=("market.costs.index_ticks=[0,0]",))["rows"][0]
    assert base["trades"] > 0 and any(name.startswith(("buy", "sell")) for name in base["top_actions"])
    assert base["walk"] != off_grid["walk"]


def test_a_scale_agent_is_described_by_the_multiples_of_its_rule(tmp_path):
    """A scale agent's census walks its rule's multiples as evaluate does (same return) and names them."""
    path = trained(tmp_path, "scale")
    row = census(path, split="validation")["rows"][0]
    cfg, data, model = load_agent(str(path), None, [], torch.device("cpu"))
    scaled = scaled_rule(cfg, data, "cpu")
    policy, state = agent_policy(model, len(data.symbols), torch.device("cpu"))
    reference = walk("agent", policy, state, data, "validation", cfg, "cpu", scaled)
    assert row["return"] == pytest.approx(underlying_metrics(reference, 0)["total_return"], rel=1e-12)
    assert row["top_actions"] and all(name.endswith(f"x {cfg.agent.scale_rule}") for name in row["top_actions"])


def test_a_missing_checkpoint_is_one_line(tmp_path):
    """The command as a user runs it: exit status 2 and one line naming the file."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "studies" / "agent_actions.py"),
                           str(tmp_path / "nothing.pt")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1 and "nothing.pt" in err
