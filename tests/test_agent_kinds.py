"""agent.kind: the cascaded LSTM and the two variants of the paper's comparison (lstm: no LSTM 1; mlp: no
recurrence) train, checkpoint, evaluate and predict through the same interface."""
import tempfile
from pathlib import Path

import pytest
import torch
from conftest import make_bars, strict_loads
from torch import nn

from clstm_ppo.agent.from_checkpoint import load_agent
from clstm_ppo.agent.model import ActorCritic
from clstm_ppo.cli import run_cli
from clstm_ppo.config import AgentConfig, load_config
from clstm_ppo.evaluate import main as evaluate_main
from clstm_ppo.predict import main as predict_main
from clstm_ppo.run_files.run_state import load_checkpoint, save_checkpoint
from clstm_ppo.train import main as train_main
from clstm_ppo.training.runner import Trainer

KINDS = ("clstm", "lstm", "mlp")
SIZES = {"lstm1_hidden": 8, "mlp_hidden": 8, "lstm2_hidden": 12}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One tiny smoke run per kind (two updates of 8 copies x 32 steps); kind -> latest.pt."""
    root = tmp_path_factory.mktemp("kinds")
    out = {}
    for kind in KINDS:
        args = ["--config", "smoke", "--checkpoint-dir", str(root), "--run-name", kind, "--total-steps", "512",
                "--num-envs", "8", "--set", f"agent.kind={kind}", "--set", "launch.threads_per_worker=1"]
        assert run_cli(train_main, args) == 0
        out[kind] = root / kind / "latest.pt"
    return out


def model(kind: str, n_features: int = 5, portfolio: int = 3, actions: int = 6) -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(n_features, portfolio, actions, AgentConfig(**SIZES, kind=kind))


def test_lstm_has_no_lstm_1_and_mlp_no_recurrence():
    names = {kind: [n for n, _ in model(kind).named_parameters()] for kind in KINDS}
    assert any(n.startswith("encoder.lstm.") for n in names["clstm"])
    assert any(n.startswith("lstm2.") for n in names["clstm"])
    assert not any(n.startswith("encoder.lstm.") for n in names["lstm"]), "no LSTM 1"
    assert any(n.startswith("lstm2.") for n in names["lstm"])
    assert not any(isinstance(m, nn.LSTM | nn.GRU | nn.RNN) for m in model("mlp").modules()), "no recurrence"
    assert model("mlp").initial_state(4, torch.device("cpu"))[0].numel() == 0
    # The default stays the cascaded LSTM, and its parameter names (the checkpoints' keys) did not change.
    assert AgentConfig().kind == "clstm"
    assert sorted(names["clstm"]) == sorted(
        ["encoder.lstm.weight_ih_l0", "encoder.lstm.weight_hh_l0", "encoder.lstm.bias_ih_l0",
         "encoder.lstm.bias_hh_l0", *[f"encoder.mlp.{i}.{p}" for i in (0, 2, 4) for p in ("weight", "bias")],
         "lstm2.weight_ih_l0", "lstm2.weight_hh_l0", "lstm2.bias_ih_l0", "lstm2.bias_hh_l0",
         "actor.weight", "actor.bias", "critic.weight", "critic.bias"])


def inputs(steps: int, envs: int = 2, tw: int = 4, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    windows = torch.randn(steps, envs, tw, 5, generator=g)
    portfolio = torch.randn(steps, envs, 3, generator=g)
    return windows, portfolio, torch.ones(steps, envs, 6, dtype=torch.bool)


@pytest.mark.parametrize("kind", KINDS)
def test_cached_codes_and_distinct_bars_give_the_same_decisions(kind):
    net = model(kind)
    windows, portfolio, mask = inputs(5)
    starts = torch.zeros(5, 2, dtype=torch.bool)
    starts[0] = True
    state = net.initial_state(2, torch.device("cpu"))
    logits, values, _ = net(windows, portfolio, mask, starts, state)
    code = net.encoder(windows.reshape(10, 4, 5)).view(5, 2, -1)
    assert code.shape[-1] == SIZES["mlp_hidden"], "the trainer's code cache is mlp_hidden wide for every kind"
    cached, cached_values, _ = net.decide(code, portfolio, mask, starts, state)
    by_bar, _, _ = net(windows.reshape(10, 4, 5), portfolio, mask, starts, state, torch.arange(10).view(5, 2))
    torch.testing.assert_close(cached, logits)
    torch.testing.assert_close(cached_values, values)
    torch.testing.assert_close(by_bar, logits)


@pytest.mark.parametrize("kind", ["clstm", "lstm"])
def test_a_recurrent_kind_carries_its_state_and_resets_it_at_episode_starts(kind):
    net = model(kind)
    windows, portfolio, mask = inputs(3)
    zero = net.initial_state(2, torch.device("cpu"))
    starts = torch.zeros(3, 2, dtype=torch.bool)
    starts[0] = True
    carried, _, _ = net(windows, portfolio, mask, starts, zero)
    alone, _, _ = net(windows[2:], portfolio[2:], mask[2:], starts[:1], zero)  # the last step, fresh
    assert not torch.allclose(carried[2], alone[0]), "history reaches the decision through LSTM 2's state"
    starts[2] = True  # an episode starts at the last step: its decision forgets the steps before
    reset, _, _ = net(windows, portfolio, mask, starts, zero)
    torch.testing.assert_close(reset[2], alone[0])
    # Step by step with the returned state equals the whole sequence at once.
    starts[2] = False
    state, stepped = zero, []
    for t in range(3):
        out, _, state = net(windows[t:t + 1], portfolio[t:t + 1], mask[t:t + 1], starts[t:t + 1], state)
        stepped.append(out)
    torch.testing.assert_close(torch.cat(stepped), carried)


def test_mlp_decisions_do_not_depend_on_earlier_steps():
    net = model("mlp")
    windows, portfolio, mask = inputs(3)
    starts = torch.zeros(3, 2, dtype=torch.bool)
    state = net.initial_state(2, torch.device("cpu"))
    logits, _, after = net(windows, portfolio, mask, starts, state)
    alone, _, _ = net(windows[2:], portfolio[2:], mask[2:], starts[:1], state)
    torch.testing.assert_close(logits[2], alone[0])
    other_history, _, _ = net(torch.randn_like(windows[:2]), torch.randn_like(portfolio[:2]), mask[:2],
                              starts[:2], state)
    assert not torch.allclose(other_history[1], logits[1])
    assert after[0].shape == (1, 2, 0) and after[1].shape == (1, 2, 0), "the empty state passes through"
    # Only the window's last row (the current bar) is read.
    earlier = windows.clone()
    earlier[:, :, :-1] = 0.0
    torch.testing.assert_close(net(earlier, portfolio, mask, starts, state)[0], logits)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("steps", [16, 128])  # 128 x 8 copies cover the training bars: the rollout caches codes
def test_a_ppo_update_has_finite_gradients_that_reach_every_parameter(kind, steps):
    cfg = load_config("smoke", [f"agent.kind={kind}", "train.num_envs=8", f"ppo.num_steps={steps}",
                                "ppo.update_epochs=1", "ppo.num_minibatches=2"])
    trainer = Trainer(cfg, Path(tempfile.mkdtemp()), torch.device("cpu"))
    assert (trainer.rollout.bar_codes() is None) == (steps == 16)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    stats, _ = trainer.train_step()
    assert stats["nonfinite"] == 0.0
    assert all(torch.isfinite(torch.tensor(v)) for k, v in stats.items() if k != "explained_variance")
    for name, param in trainer.model.named_parameters():
        assert torch.isfinite(param).all(), name
        assert not torch.equal(param, before[name]), f"{name} got no gradient"


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_trains_and_its_checkpoint_evaluates_and_predicts(kind, runs, tmp_path, capsys):
    state = load_checkpoint(runs[kind])
    assert state.config["agent"]["kind"] == kind
    _, _, net = load_agent(str(runs[kind]), None, [], torch.device("cpu"))
    assert net.kind == kind
    report = tmp_path / "report.json"
    assert run_cli(evaluate_main, ["--checkpoint", str(runs[kind]), "--split", "test", "--json", str(report)]) == 0
    agent = strict_loads(report.read_text())["policies"]["agent"]["SYN0"]
    assert agent["total_return"] == agent["total_return"], "a number, not NaN"
    bars = tmp_path / "SPY.csv"
    make_bars(600, seed=7).to_csv(bars, index=False)
    capsys.readouterr()
    assert run_cli(predict_main, ["--checkpoint", str(runs[kind]), "--data", str(bars), "--json"]) == 0
    decision = strict_loads(capsys.readouterr().out.strip().splitlines()[-1])["decisions"][0]
    assert decision["valid"][decision["action"]]
    assert abs(sum(decision["probabilities"]) - 1) < 1e-5


def test_a_checkpoint_written_before_agent_kind_loads_as_clstm(runs, tmp_path, capsys):
    state = load_checkpoint(runs["clstm"])
    del state.config["agent"]["kind"]
    old = tmp_path / "old.pt"
    save_checkpoint(state, old)
    _, _, net = load_agent(str(old), None, [], torch.device("cpu"))
    assert net.kind == "clstm" and hasattr(net.encoder, "lstm")
    assert run_cli(evaluate_main, ["--checkpoint", str(old), "--set", "agent.kind=mlp"]) == 2
    assert "as does agent.kind" in capsys.readouterr().err


def test_pretraining_fits_the_current_bar_projection_of_a_kind_without_lstm_1(tmp_path):
    args = ["--config", "smoke", "--checkpoint-dir", str(tmp_path), "--total-steps", "256", "--num-envs", "8",
            "--set", "agent.kind=lstm", "--set", "pretrain.epochs=2", "--pretraining"]
    assert run_cli(train_main, args) == 0
    rows = (tmp_path / "synthetic-smoke" / "pretrain_loss.csv").read_text().splitlines()[1:]
    assert len(rows) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_initial_hold_sets_the_untrained_policys_hold_probability_and_zero_keeps_the_old_init(kind):
    """agent.initial_hold: the untrained policy holds with that probability on any input, the other actions sharing
    the rest evenly; at 0 (the default) the weights are the ones every earlier run started from, bit for bit."""
    n_actions, features, portfolio = 9, 5, 4
    windows, port = torch.randn(3, 4, 6, features), torch.randn(3, 4, portfolio)
    mask, starts = torch.ones(3, 4, n_actions, dtype=torch.bool), torch.zeros(3, 4, dtype=torch.bool)
    for hold in (0.5, 0.9):
        torch.manual_seed(0)
        model = ActorCritic(features, portfolio, n_actions, AgentConfig(**SIZES, kind=kind,
                                                                        initial_hold=hold))
        probs = torch.softmax(model(windows, port, mask, starts, model.initial_state(4, "cpu"))[0], -1)
        assert torch.allclose(probs[..., 0], torch.tensor(hold), atol=0.02)  # the actor's weights start at gain 0.01
        others = probs[..., 1:]
        assert torch.allclose(others, others.mean(-1, keepdim=True), rtol=0.2)
    states = []
    for config in (AgentConfig(**SIZES, kind=kind), AgentConfig(**SIZES, kind=kind, initial_hold=0.0)):
        torch.manual_seed(0)
        states.append(ActorCritic(features, portfolio, n_actions, config).state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert float(states[0]["actor.bias"].abs().max()) == 0.0


def test_mlp_has_its_own_width_and_a_checkpoint_from_when_it_took_lstm_2s_loads_at_that_width(runs, tmp_path):
    wide = ActorCritic(5, 3, 6, AgentConfig(**SIZES, kind="mlp", mlp_core_hidden=20))
    assert wide.core[0].out_features == 20 and wide.actor.in_features == 20
    state = load_checkpoint(runs["mlp"])
    width = state.config["agent"]["lstm2_hidden"]
    del state.config["agent"]["mlp_core_hidden"]  # as written before the setting existed (smoke: 32, not 128)
    old = tmp_path / "old.pt"
    save_checkpoint(state, old)
    cfg, _, net = load_agent(str(old), None, [], torch.device("cpu"))
    assert cfg.agent.mlp_core_hidden == width and net.core[0].out_features == width


@pytest.mark.parametrize("kind", ["lstm", "mlp"])
def test_a_checkpoint_that_kept_the_bar_projection_as_mlp_0_loads_and_decides_the_same(kind, runs, tmp_path):
    """Before the current bar's projection had its own name its layer was saved as ``encoder.mlp.0``; such a
    checkpoint loads (strictly) and its agent decides as the one it was written from."""
    from clstm_ppo.env import PORTFOLIO_FEATURES

    state = load_checkpoint(runs[kind])
    assert {"encoder.linear.weight", "encoder.linear.bias"} <= set(state.model)
    state.model = {k.replace("encoder.linear.", "encoder.mlp.0."): v for k, v in state.model.items()}
    old = tmp_path / "old.pt"
    save_checkpoint(state, old)
    nets = [load_agent(str(path), None, [], torch.device("cpu"))[2] for path in (old, runs[kind])]
    g = torch.Generator().manual_seed(2)
    windows = torch.randn(3, 2, 4, nets[0].encoder.linear.in_features, generator=g)
    portfolio = torch.randn(3, 2, len(PORTFOLIO_FEATURES), generator=g)
    mask = torch.ones(3, 2, nets[0].actor.out_features, dtype=torch.bool)
    starts = torch.zeros(3, 2, dtype=torch.bool)
    old_out, new_out = (net(windows, portfolio, mask, starts, net.initial_state(2, torch.device("cpu")))
                        for net in nets)
    assert torch.equal(old_out[0], new_out[0]) and torch.equal(old_out[1], new_out[1])
