"""The agent's parts: GAE against a textbook recursion, sequence replay, the learning-rate schedule, gradients and
losses under each precision, accumulation, per-rank streams, and the optimizer step object (its captured form:
test_optimizer_step.py)."""
import numpy as np
import pytest
import torch

from clstm_ppo.agent import ActorCritic, RolloutStorage, compute_gae
from clstm_ppo.config import AgentConfig, Config, DataConfig, SyntheticConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv


def reference_gae(rewards, values, dones, last_value, gamma, lam):
    """GAE by the textbook recursion, one env at a time, in plain Python floats."""
    steps, envs = len(rewards), len(rewards[0])
    adv = [[0.0] * envs for _ in range(steps)]
    for n in range(envs):
        running = 0.0
        for t in reversed(range(steps)):
            next_v = last_value[n] if t == steps - 1 else values[t + 1][n]
            mask = 0.0 if dones[t][n] else 1.0
            delta = rewards[t][n] + gamma * next_v * mask - values[t][n]
            running = delta + gamma * lam * mask * running
            adv[t][n] = running
    return adv


def test_gae_matches_a_plain_python_reference():
    gen = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(20, 5, generator=gen), torch.randn(20, 5, generator=gen)
    dones = torch.rand(20, 5, generator=gen) < 0.15
    last = torch.randn(5, generator=gen)
    adv, ret = compute_gae(rewards, values, dones, last, 0.99, 0.95)
    want = reference_gae(rewards.tolist(), values.tolist(), dones.tolist(), last.tolist(), 0.99, 0.95)
    np.testing.assert_allclose(adv.numpy(), np.array(want), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ret, adv + values)


def test_sequence_replay_gives_the_rollouts_logprobs_and_values():
    """The minibatch path (fused LSTM chunks, resets at episode starts) equals step-by-step collection."""
    # Several episode starts inside a 40-step rollout, begun mid-episode with a non-zero carried state.
    model, storage, env = collect_rollout(num_envs=6, steps=40, episode_length=9, warmup_steps=3)
    assert storage.starts[1:].any(dim=1).sum() >= 3, "the rollout should hold episode starts to reset at"
    idx = torch.tensor([4, 1, 3])
    logits, values, _ = model(env.market_windows.gather(storage.rows[:, idx]), storage.portfolio[:, idx],
                              storage.mask[:, idx],
                              storage.starts[:, idx], tuple(s[:, idx] for s in storage.initial_state))
    logprob = torch.distributions.Categorical(logits=logits).log_prob(storage.actions[:, idx])
    torch.testing.assert_close(logprob, storage.logprobs[:, idx], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(values, storage.values[:, idx], rtol=1e-5, atol=1e-5)
    assert not storage.mask[:, idx].gather(-1, storage.actions[:, idx, None]).eq(False).any(), "masked sampled"


def test_learning_rate_warms_up_then_decays_linearly():
    from clstm_ppo.agent.ppo import lr_factor
    from clstm_ppo.config import PPOConfig

    linear = PPOConfig(lr_schedule="linear", warmup_updates=4)  # 100 updates of 10 env steps planned
    assert [lr_factor(u, 10 * u, 1000, linear) for u in (0, 1, 3)] == pytest.approx([0.25, 0.5 * 0.99, 0.97])
    assert lr_factor(50, 500, 1000, linear) == pytest.approx(0.5) and lr_factor(100, 1000, 1000, linear) == 0.0
    # By env steps: after 50 updates of 10 steps, 25 more updates of 20 steps (twice the workers) end the budget.
    assert lr_factor(75, 500 + 25 * 20, 1000, linear) == 0.0 and lr_factor(60, 700, 1000, linear) == pytest.approx(0.3)
    constant = PPOConfig(lr_schedule="constant")
    assert {lr_factor(u, u, 10, constant) for u in range(20)} == {1.0}


def collect_rollout(num_envs: int = 4, steps: int = 12, episode_length: int = 252, warmup_steps: int = 0):
    """A small model's rollout stored as the trainer stores it, with GAE computed."""
    torch.manual_seed(0)
    cfg = Config()
    cfg.env.episode_length = episode_length
    data = build_market_data(DataConfig(source="synthetic", window=8, turbulence_lookback=60,
                                        synthetic=SyntheticConfig(n_bars=700)))
    env = BatchedOptionsEnv(data, "train", cfg.market, cfg.env, num_envs=num_envs, seed=3)
    model = ActorCritic(len(data.feature_names), len(PORTFOLIO_FEATURES), env.actions.n,
                        AgentConfig(lstm1_hidden=8, mlp_hidden=8, lstm2_hidden=12))
    storage = RolloutStorage(steps, num_envs, len(PORTFOLIO_FEATURES), env.actions.n, torch.device("cpu"))
    state = model.initial_state(num_envs, torch.device("cpu"))
    obs = env.reset()
    with torch.no_grad():
        for _ in range(warmup_steps):
            _, _, state = model(obs.market[None], obs.portfolio[None], obs.mask[None], obs.start[None], state)
            obs = env.step(torch.zeros(num_envs, dtype=torch.long)).obs
        storage.initial_state = tuple(x.clone() for x in state)
        for step in range(steps):
            logits, value, state = model(obs.market[None], obs.portfolio[None], obs.mask[None], obs.start[None], state)
            dist = torch.distributions.Categorical(logits=logits[0])
            action = dist.sample()
            result = env.step(action)
            storage.add(step, obs.row, obs.portfolio, obs.mask, obs.start, action, dist.log_prob(action), value[0],
                        result.reward, result.terminated | result.truncated)
            obs = result.obs
        _, last, _ = model(obs.market[None], obs.portfolio[None], obs.mask[None], obs.start[None], state)
    storage.finish(last[0], 0.99, 0.95)
    return model, storage, env


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_non_finite_gradient_is_reported_once_the_update_is_over(precision):
    """The finite check is a device flag read with the statistics (no sync per minibatch): an infinite return
    makes the value gradient non-finite, and the update says so; the same rollout without it does not."""
    import copy

    from clstm_ppo.agent import UpdatePaths, ppo_update
    from clstm_ppo.agent.precision import Precision
    from clstm_ppo.config import PPOConfig

    model, storage, env = collect_rollout()
    cfg = PPOConfig(update_epochs=2, num_minibatches=2)
    for poisoned in (False, True):
        s = copy.deepcopy(storage)
        if poisoned:
            s.returns[3, 1] = float("inf")  # one minibatch's value loss, in the first epoch
        m, prec = copy.deepcopy(model), Precision(torch.device("cpu"), precision)
        m.run_lstms_in_float32(prec.lstms_in_float32)  # as the trainer does: fp32 LSTMs where the CPU has no bf16 one
        stats = ppo_update(m, torch.optim.Adam(m.parameters(), lr=1e-3), s, env.market_windows, cfg,
                           torch.Generator().manual_seed(0), UpdatePaths(precision=prec))
        assert stats["nonfinite"] == float(poisoned)
        weights_finite = all(bool(p.isfinite().all()) for p in m.parameters())
        assert weights_finite != poisoned, "a non-finite step leaves NaN weights, which the trainer never saves"


def test_gradient_accumulation_equals_one_large_minibatch():
    import copy

    from clstm_ppo.agent import ppo_update
    from clstm_ppo.config import PPOConfig

    model, storage, env = collect_rollout()
    results = []
    for minibatches, accumulate in ((1, 1), (2, 2), (4, 4)):
        m = copy.deepcopy(model)
        optimizer = torch.optim.Adam(m.parameters(), lr=1e-3)
        cfg = PPOConfig(update_epochs=1, num_minibatches=minibatches, grad_accumulation=accumulate)
        stats = ppo_update(m, optimizer, storage, env.market_windows, cfg, torch.Generator().manual_seed(0))
        assert stats["nonfinite"] == 0.0
        results.append(m.state_dict())
    for other in results[1:]:
        for name in results[0]:
            torch.testing.assert_close(other[name], results[0][name], rtol=1e-5, atol=1e-6, msg=name)
    moved = copy.deepcopy(model).state_dict()
    assert any(not torch.equal(moved[n], results[0][n]) for n in moved), "the update should move the weights"


def test_the_heads_give_float32_masked_logits_under_float16_autocast():
    """fp16 on a GPU runs the heads under float16 autocast: the mask value must not overflow the half logits."""
    model = ActorCritic(4, 3, 6, AgentConfig(lstm1_hidden=8, mlp_hidden=8, lstm2_hidden=16))
    out = torch.randn(2, 5, 16)
    mask = torch.rand(2, 5, 6) > 0.4
    mask[..., 0] = True
    with torch.autocast("cpu", dtype=torch.float16):
        assert model.actor(out).dtype == torch.float16, "autocast really computes the head in half precision"
        with pytest.raises(RuntimeError):
            model.actor(out).masked_fill(~mask, -1e9)  # what the model did before: it cannot hold -1e9
        logits, values = model.heads(out, mask)
    assert logits.dtype == values.dtype == torch.float32
    assert (logits[~mask] == -1e9).all() and torch.isfinite(logits[mask]).all()
    probs = torch.distributions.Categorical(logits=logits, validate_args=False).probs
    assert (probs[~mask] == 0).all() and torch.allclose(probs.sum(-1), torch.ones(2, 5))


def test_encoding_each_distinct_bar_once_gives_the_per_window_logits_and_gradients():
    model, storage, env = collect_rollout(num_envs=6, steps=16)
    rows = storage.rows
    rows[:, 3:] = rows[:, :3]  # copies on the same bars, as many copies of one underlying often are
    args = (storage.portfolio, storage.mask, storage.starts, storage.initial_state)

    def loss_and_grads(windows, *bar_index):
        model.zero_grad()
        logits, values, _ = model(windows, *args, *bar_index)
        loss = torch.log_softmax(logits, -1).gather(-1, storage.actions.unsqueeze(-1)).sum() + values.square().sum()
        loss.backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    per_window = loss_and_grads(env.market_windows.gather(rows))
    bars, index = torch.unique(rows, return_inverse=True)
    assert bars.numel() < rows.numel() / 2
    deduplicated = loss_and_grads(env.market_windows.gather(bars), index)
    torch.testing.assert_close(deduplicated[0], per_window[0], rtol=1e-5, atol=1e-5)
    for name, grad in per_window[1].items():
        torch.testing.assert_close(deduplicated[1][name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_lstms_can_run_in_float32_inside_a_half_precision_autocast():
    """What bf16 does on CUDA (cuDNN's autocast LSTM would be fp16 there) and on a CPU without a bf16 LSTM: the
    LSTMs see float32 inputs and weights, the MLP and heads stay in the autocast dtype, and the logits match the
    float32 model's closely."""
    model = ActorCritic(5, 3, 6, AgentConfig(lstm1_hidden=8, mlp_hidden=8, lstm2_hidden=16))
    seen = []
    for lstm in (model.encoder.lstm, model.lstm2):
        lstm.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0].dtype))
    windows, portfolio = torch.randn(4, 3, 7, 5), torch.randn(4, 3, 3)
    mask, starts = torch.ones(4, 3, 6, dtype=torch.bool), torch.zeros(4, 3, dtype=torch.bool)
    state = model.initial_state(3, torch.device("cpu"))
    reference, _, _ = model(windows, portfolio, mask, starts, state)
    model.run_lstms_in_float32(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.encoder.mlp(torch.randn(2, 8)).dtype == torch.bfloat16, "autocast is on for the MLP"
        seen.clear()
        logits, values, _ = model(windows, portfolio, mask, starts, state)
    assert seen == [torch.float32, torch.float32]
    torch.testing.assert_close(logits, reference, rtol=0.05, atol=0.02)


def test_bf16_runs_the_lstms_in_float32_where_the_cpu_has_no_bf16_lstm(monkeypatch):
    """The fallback, checked on every CPU: where the probe finds no bf16 LSTM (an AVX2-only CPU), bf16 runs the
    LSTMs in float32 and says so; where it finds one, they run in bf16. fp32 and fp16 never change their LSTMs."""
    from clstm_ppo.agent import precision as module

    cpu = torch.device("cpu")
    for native in (True, False):
        monkeypatch.setattr(module, "cpu_runs_bf16_lstm", lambda native=native: native)
        bf16 = module.Precision(cpu, "bf16")
        assert bf16.lstms_in_float32 is not native
        assert bf16.describe() == ("bf16" if native else "bf16 (LSTMs in fp32: no bf16 LSTM on this CPU)")
        assert module.Precision(cpu, "fp32").lstms_in_float32 is False
        assert module.Precision(cpu, "fp32").describe() == "fp32"
    assert module.Precision(torch.device("cuda"), "bf16").describe() == \
        "bf16 (LSTMs in fp32: cuDNN would run them in fp16)"


def test_the_bf16_lstm_probe_matches_what_this_cpu_does():
    """The probe says what a real model's LSTM does here: on a CPU with a bf16 LSTM (AVX-512) the clstm's LSTM 1
    runs forward and backward in bf16 under autocast; on one without (AVX2-only, or ``ONEDNN_MAX_CPU_ISA=AVX2``)
    it fails, and the trainer's fallback (LSTMs in float32) runs."""
    from clstm_ppo.agent.precision import cpu_runs_bf16_lstm

    model = ActorCritic(5, 3, 6, AgentConfig(lstm1_hidden=8, mlp_hidden=8, lstm2_hidden=16))
    windows = torch.randn(6, 7, 5)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, _ = model.encoder.lstm(windows)
        out.float().sum().backward()
        native = out.dtype == torch.bfloat16
    except RuntimeError as error:
        assert "primitive descriptor" in str(error), error
        native = False
    assert cpu_runs_bf16_lstm() is native
    model.run_lstms_in_float32(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        code = model.encoder(windows)
    code.float().sum().backward()
    assert torch.isfinite(model.encoder.lstm.weight_hh_l0.grad).all()


def test_fp16_on_the_cpu_is_a_clear_error():
    from clstm_ppo.agent.precision import Precision
    from clstm_ppo.config import ConfigError

    with pytest.raises(ConfigError, match="fp16 needs a CUDA device; on the CPU use bf16 or fp32"):
        Precision(torch.device("cpu"), "fp16")


@pytest.mark.parametrize("precision", ["bf16"])
def test_mixed_precision_updates_stay_close_to_fp32(precision):
    import copy

    from clstm_ppo.agent import UpdatePaths, ppo_update
    from clstm_ppo.agent.precision import Precision
    from clstm_ppo.config import PPOConfig

    model, storage, env = collect_rollout()
    updated = {}
    for name in ("fp32", precision):
        m, prec = copy.deepcopy(model), Precision(torch.device("cpu"), name)
        m.run_lstms_in_float32(prec.lstms_in_float32)
        optimizer = torch.optim.Adam(m.parameters(), lr=1e-3)
        stats = ppo_update(m, optimizer, storage, env.market_windows,
                           PPOConfig(update_epochs=1, num_minibatches=1),
                           torch.Generator().manual_seed(0), UpdatePaths(precision=prec))
        assert stats["nonfinite"] == 0.0
        updated[name] = torch.cat([p.detach().flatten() for p in m.parameters()])
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    step_fp32, step_mixed = updated["fp32"] - start, updated[precision] - start
    # Adam's first step is ~lr * sign(grad): the low-precision step points the same way for almost every weight.
    agree = (torch.sign(step_fp32) == torch.sign(step_mixed)).float().mean()
    assert step_mixed.abs().max() > 0 and agree > 0.8, float(agree)


def test_every_rank_and_seed_gets_its_own_streams():
    from clstm_ppo.distributed import rank_seeds

    # Before, rank r of seed s used seed s + r: rank 1 of seed 0 replayed rank 0 of seed 1.
    assert rank_seeds(0, 1, 2) != rank_seeds(1, 0, 2)
    streams = [rank_seeds(seed, rank, 4, restart) for seed in range(3) for rank in range(4) for restart in (0, 7)]
    values = [v for s in streams for v in s]
    assert len(set(values)) == len(values), "no stream shared across ranks, seeds, restarts or purposes"
    assert rank_seeds(5, 2, 4) == rank_seeds(5, 2, 4), "reproducible"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_optimizer_step_object_updates_as_the_precisions_step_and_flags_nonfinite_gradients(precision):
    """ppo_update with an ``OptimizerStep`` (what a captured step replays on CUDA; eager here) lands on the same
    weights as the default clip-and-step, and still reports a non-finite update."""
    import copy

    from clstm_ppo.agent import UpdatePaths, ppo_update
    from clstm_ppo.agent.optimizer_step import OptimizerStep, make_adam
    from clstm_ppo.agent.precision import Precision
    from clstm_ppo.config import PPOConfig

    model, storage, env = collect_rollout()
    cfg = PPOConfig(update_epochs=2, num_minibatches=2)
    for poisoned in (False, True):
        s = copy.deepcopy(storage)
        if poisoned:
            s.returns[3, 1] = float("inf")
        weights, flags = [], []
        for use_step in (False, True):
            m, prec = copy.deepcopy(model), Precision(torch.device("cpu"), precision)
            m.run_lstms_in_float32(prec.lstms_in_float32)
            optimizer = make_adam(m.parameters(), 1e-3, cfg)
            step = OptimizerStep(optimizer, cfg.max_grad_norm, capture=True) if use_step else None
            stats = ppo_update(m, optimizer, s, env.market_windows, cfg, torch.Generator().manual_seed(0),
                               UpdatePaths(precision=prec, optimizer_step=step))
            assert step is None or not step.capture, "nothing is captured off CUDA"
            weights.append(m.state_dict())
            flags.append(stats["nonfinite"])
        assert flags == [float(poisoned)] * 2
        for name, value in weights[0].items():
            torch.testing.assert_close(weights[1][name], value, rtol=0, atol=0, equal_nan=True, msg=name)
