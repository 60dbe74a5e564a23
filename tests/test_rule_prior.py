"""A prior from the rules (pretraining/rule_prior.py): the rule is the best fixed rule of the training years alone, the
policy cloned from it takes its action on nearly every training decision, and PPO's penalty to it is exactly its
weight times -log pi(the rule's action), falling to 0 on schedule."""
import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import strict_loads

from clstm_ppo.agent.model import MASKED_LOGIT
from clstm_ppo.agent.ppo import ppo_losses
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.rollout import collect
from clstm_ppo.agent.storage import RolloutStorage
from clstm_ppo.backtest.conditional import conditional_family, pick_conditional_rule
from clstm_ppo.backtest.gates import gate_series
from clstm_ppo.backtest.rules import FixedRule, GatedRule, pick_rule
from clstm_ppo.cli import run_cli
from clstm_ppo.config import ConfigError, PPOConfig, load_config, to_dict
from clstm_ppo.env import ActionSpace
from clstm_ppo.env.observation import PORTFOLIO_FEATURES
from clstm_ppo.market.observed import observed_market_data
from clstm_ppo.pretraining.rule_prior import (
    RulePrior,
    clone_rule,
    cloning_loss,
    pick_prior,
    prior_coef,
    rule_actions,
)
from clstm_ppo.train import main as train_main
from clstm_ppo.training.runner import Trainer

CPU = torch.device("cpu")


def test_the_prior_is_picked_on_the_training_years_alone():
    """Validation and test bars scaled wildly leave the pick, its score and the dates it walked unchanged; the
    pick is the best of every fixed rule walked over the training split."""
    cfg = load_config("smoke", [])
    data = observed_market_data(cfg)
    prior = RulePrior(data, cfg, CPU)
    start, end = data.split_dates("train")
    assert prior.pick.split == "train" and prior.pick.walked == f"{start.date()}..{end.date()}"
    altered = observed_market_data(cfg)
    later = slice(data.splits["train"][1], None)
    for key in ("open", "high", "low", "close"):
        altered.bars[key][:, later] *= np.linspace(1.0, 3.0, altered.bars[key][:, later].shape[1])
    altered.bars["iv"][:, later] *= 2.5
    again = RulePrior(altered, cfg, CPU)
    assert (again.pick.rule, again.pick.score) == (prior.pick.rule, prior.pick.score)
    on_validation = pick_rule(data, cfg, CPU)
    assert on_validation.split == "validation" and on_validation.walked != prior.pick.walked
    assert prior.describe().startswith(f"prior: {prior.pick.name}, the best sharpe_excess")


def test_behaviour_cloning_takes_the_rules_action_on_nearly_every_training_decision():
    """After cloning, a fresh rollout of the rule on the training env: the policy's greedy choice is the rule's on
    at least 95% of the decisions (counted here independently of the cloner's own score)."""
    cfg = load_config("smoke", ["pretrain.enabled=true", "pretrain.method=rule"])
    trainer = Trainer(cfg, Path(tempfile.mkdtemp()), CPU)
    obs = trainer.env.reset()
    history, obs, state = clone_rule(trainer.model, trainer.env, obs, trainer.rollout.lstm_state,
                                     trainer.ppo_update.prior.act, cfg, torch.Generator().manual_seed(0))
    assert history[0]["matched"] < 0.5, "the untrained policy is not the rule already (else this proves nothing)"
    storage = RolloutStorage(cfg.ppo.num_steps, trainer.env.num_envs, obs.portfolio.shape[-1],
                             trainer.env.actions.n, CPU)
    greedy = []

    def rule_and_record(o):
        return trainer.ppo_update.prior.act(o.portfolio, o.mask, o.row)
    collect(trainer.model, trainer.env, storage, obs, state, Precision(CPU, "fp32"), cfg.ppo, None,
            act=rule_and_record)
    with torch.no_grad():
        h0, c0 = storage.initial_state
        bars, index = torch.unique(storage.rows, return_inverse=True)
        logits, _, _ = trainer.model(trainer.env.market_windows.gather(bars), storage.portfolio, storage.mask,
                                     storage.starts, (h0, c0), index)
    greedy = logits.argmax(-1)
    rule = rule_actions(trainer.ppo_update.prior.pick, trainer.data, cfg, CPU)(storage.portfolio, storage.mask,
                                                                             storage.rows)
    assert torch.equal(rule, storage.actions), "the rollout followed the rule"
    assert (rule != 0).any() and (rule == 0).any(), "the rule both trades and holds here"
    assert float((greedy == rule).float().mean()) >= 0.95


def test_cloning_loss_is_the_cross_entropy_from_the_rule_smoothed_over_the_valid_actions():
    """Against a plain-numpy cross-entropy on hand-made logits: the target is 1 - eps on the rule's action plus
    eps / (valid actions) on each valid one, masked actions carry nothing, each decision weighs as its action's
    rarity; eps = 0 is the weighted negative log-likelihood of the rule's action."""
    gen = torch.Generator().manual_seed(3)
    mask = torch.rand(5, 4, 6, generator=gen) > 0.4
    mask[..., 2] = True
    logits = torch.randn(5, 4, 6, generator=gen).masked_fill(~mask, MASKED_LOGIT)
    actions = torch.where(mask.sum(-1) > 1, (mask * torch.rand(5, 4, 6, generator=gen)).argmax(-1), 2)
    weight = torch.tensor([0.5, 1.0, 2.0, 0.7, 1.3, 3.0])
    for eps in (0.0, 0.3, 0.9):
        total = 0.0
        for i, j in np.ndindex(5, 4):
            valid = mask[i, j].numpy()
            z = logits[i, j].double().numpy()[valid]
            log_p = z - np.log(np.exp(z - z.max()).sum()) - z.max()
            target = np.full(valid.sum(), eps / valid.sum())
            target[np.flatnonzero(valid).tolist().index(int(actions[i, j]))] += 1.0 - eps
            total += float(weight[actions[i, j]]) * -(target * log_p).sum()
        got = cloning_loss(logits, actions, mask, weight, eps)
        assert float(got) == pytest.approx(total / 20, rel=1e-5)


def test_a_smoothed_clone_still_walks_the_rule_but_keeps_sampling_the_other_actions():
    """prior.smoothing 0.5: greedy decisions still match the rule on >= 95% of a fresh rollout, while the
    rule's action has at most the target's 0.75 on the median decision (an unsmoothed clone ends near 1)."""
    cfg = load_config("smoke", ["pretrain.enabled=true", "pretrain.method=rule", "prior.smoothing=0.5"])
    trainer = Trainer(cfg, Path(tempfile.mkdtemp()), CPU)
    history, _, _ = clone_rule(trainer.model, trainer.env, trainer.env.reset(), trainer.rollout.lstm_state,
                               trainer.ppo_update.prior.act, cfg, torch.Generator().manual_seed(0))
    assert history[-1]["matched"] >= 0.95
    assert 0.2 < history[-1]["p_rule"] <= 0.75


def test_the_penalty_is_its_weight_times_the_rules_negative_log_probability_and_decays_on_schedule():
    torch.manual_seed(0)
    logits = torch.randn(5, 4, 7)
    logits[..., 6] = -1e9  # a masked action
    prior = torch.randint(0, 6, (5, 4))
    args = (torch.zeros(5, 4), torch.randint(0, 6, (5, 4)), torch.zeros(5, 4), torch.randn(5, 4), torch.zeros(5, 4),
            torch.zeros(5, 4), prior)
    cfg = PPOConfig()
    base, stats = ppo_losses(logits, *args, torch.tensor(0.0), cfg)
    weighted, _ = ppo_losses(logits, *args, torch.tensor(0.3), cfg)
    expected = -torch.log_softmax(logits, -1).gather(-1, prior.unsqueeze(-1)).mean()
    torch.testing.assert_close(stats[5], expected)
    torch.testing.assert_close(weighted - base, 0.3 * expected)
    train = load_config("smoke", ["pretrain.enabled=true", "pretrain.method=rule", "prior.kl=0.4",
                                  "prior.kl_until=0.5"])
    assert [prior_coef(train, steps, 1000) for steps in (0, 250, 500, 900)] == pytest.approx([0.4, 0.2, 0.0, 0.0])


def test_a_prior_penalty_without_a_rule_to_start_from_is_one_line(tmp_path, capsys):
    assert run_cli(train_main, ["--config", "smoke", "--checkpoint-dir", str(tmp_path),
                                "--set", "prior.kl=0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: config: prior.kl (0.1) keeps the policy near the rule") and "\n" not in err
    with pytest.raises(ConfigError, match="choose one of supervised, maml, protonet, rule"):
        load_config("smoke", ["pretrain.method=bad"])


def test_a_run_started_from_the_rule_says_which_and_resumes_exactly(tmp_path, capsys):
    """The run's log names the rule and how closely it was cloned, and the penalty's weight and -log pi(rule) are
    in every update's record; a resume from the middle ends on the uninterrupted run's weights. (The penalty's
    schedule, like the learning rate's, runs over the launch's planned steps: the resumed halves take it off.)"""
    from clstm_ppo.run_files.run_state import load_checkpoint

    common = ["--config", "smoke", "--pretraining", "--set", "pretrain.method=rule", "--set",
              "prior.rollouts=3", "--set", "ppo.lr_schedule=constant", "--set", "train.eval_every=2",
              "--set", "train.num_envs=8", "--set", "ppo.num_minibatches=1", "--set", "launch.threads_per_worker=1"]
    batch = 8 * 32
    assert run_cli(train_main, [*common, "--checkpoint-dir", str(tmp_path / "kl"), "--total-steps", str(4 * batch),
                                "--set", "prior.kl=0.5"]) == 0
    out = capsys.readouterr().out
    assert "prior: " in out and "behaviour cloning matched" in out and "of 147 fixed rules on train" in out
    records = [strict_loads(line) for line in (tmp_path / "kl" / "synthetic-smoke" / "metrics.jsonl").read_text()
               .splitlines()]
    updates = [r for r in records if r["kind"] == "update"]
    assert len(updates) == 4 and all(r["prior_nll"] > 0 for r in updates)
    for root, steps in (("a", 4), ("b", 2), ("b", 4)):
        resume = ["--resume-from", "latest"] if (root, steps) == ("b", 4) else []
        assert run_cli(train_main, [*common, "--checkpoint-dir", str(tmp_path / root), "--total-steps",
                                    str(steps * batch), *resume]) == 0
    a = load_checkpoint(tmp_path / "a" / "synthetic-smoke" / "latest.pt").model
    b = load_checkpoint(tmp_path / "b" / "synthetic-smoke" / "latest.pt").model
    for name, value in a.items():
        assert torch.equal(b[name], value), name


def test_the_contracts_run_starts_from_the_rule_and_older_runs_resume_as_they_ran(tmp_path, capsys):
    """``--config contracts`` (the default run before the scale agent) clones the training years' best rule and
    keeps the fading pull toward it; the default (what ``make run`` and a bare ``clstm-ppo-train`` train), smoke
    and paper start from nothing; a checkpoint saved before the pull existed resumes without it; ``--no-pretraining``
    alone under the pull is refused in one line naming the other setting."""
    contracts = load_config("contracts", [])
    assert (contracts.pretrain.enabled, contracts.pretrain.method, contracts.prior.kl) == (True, "rule", 0.5)
    assert load_config("default", []) == load_config(None, [])
    for cfg in (load_config(name, []) for name in ("default", "smoke", "paper")):
        assert (cfg.pretrain.enabled, cfg.prior.kl) == (False, 0.0)
    saved = to_dict(load_config("smoke", []))
    del saved["prior"]["kl"]
    assert load_config(None, [], base=saved).prior.kl == 0.0
    assert run_cli(train_main, ["--config", "contracts", "--checkpoint-dir", str(tmp_path), "--no-pretraining"]) == 2
    err = capsys.readouterr().err.strip()
    assert "prior.kl (0.5)" in err and "prior.kl 0" in err and "\n" not in err
    assert run_cli(train_main, ["--config", "smoke", "--checkpoint-dir", str(tmp_path), "--no-pretraining",
                                "--total-steps", "512"]) == 0


def test_a_conditional_prior_is_the_best_gated_rule_of_the_training_years_and_follows_its_gate():
    """prior.rules conditional: the pick is best_conditional_rule's family picked on the training years (as
    pick_conditional_rule picks it there), and the prior's action follows the gate bar by bar: the rule's order
    where the gate is open at the observed bar, none where it is shut."""
    cfg = load_config("smoke", ["pretrain.enabled=true", "pretrain.method=rule",
                                "prior.rules=conditional"])
    data = observed_market_data(cfg)
    pick = pick_prior(data, cfg, CPU)
    assert pick.split == "train" and pick.tried == len(conditional_family(ActionSpace.from_config(cfg.market)))
    assert pick.name == pick_conditional_rule(data, cfg, CPU, "sharpe_excess", "train").name
    actions = ActionSpace.from_config(cfg.market)
    sale = actions.sell(False, 0, 0)
    gated = dataclasses.replace(pick, rule=GatedRule(FixedRule(None, sale), "vrp_positive"))
    rows = torch.arange(len(data.symbols) * len(data.dates))
    portfolio = torch.zeros(len(rows), len(PORTFOLIO_FEATURES))  # nothing open: every slot free
    mask = torch.ones(len(rows), actions.n, dtype=torch.bool)
    chosen = rule_actions(gated, data, cfg, CPU)(portfolio, mask, rows)
    open_ = torch.as_tensor(gate_series(data, cfg.market)["vrp_positive"].reshape(-1))
    assert 0.1 < float(open_.float().mean()) < 0.9
    assert torch.equal(chosen, torch.where(open_, sale, actions.hold))
