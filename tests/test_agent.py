import numpy as np
import pytest
import torch

from clstm_ppo.agent import CascadedActorCritic, RolloutStorage, compute_gae
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
    torch.manual_seed(0)
    cfg = Config()
    cfg.env.episode_length = 9  # several episode starts inside a 40-step rollout
    data = build_market_data(DataConfig(source="synthetic", window=8, turbulence_lookback=60,
                                        synthetic=SyntheticConfig(n_bars=700)))
    env = BatchedOptionsEnv(data, "train", cfg.market, cfg.env, num_envs=6, seed=3)
    model = CascadedActorCritic(len(data.feature_names), len(PORTFOLIO_FEATURES), env.actions.n,
                                AgentConfig(lstm1_hidden=8, mlp_hidden=8, lstm2_hidden=12))
    storage = RolloutStorage(40, 6, len(PORTFOLIO_FEATURES), env.actions.n, torch.device("cpu"))
    state = model.initial_state(6, torch.device("cpu"))
    # Start mid-episode with a non-zero carried state, as every rollout after the first does.
    obs = env.reset()
    with torch.no_grad():
        for _ in range(3):
            _, _, state = model(obs.market[None], obs.portfolio[None], obs.mask[None], obs.start[None], state)
            obs = env.step(torch.zeros(6, dtype=torch.long)).obs
        storage.initial_state = tuple(s.clone() for s in state)
        for step in range(40):
            logits, value, state = model(obs.market[None], obs.portfolio[None], obs.mask[None], obs.start[None], state)
            dist = torch.distributions.Categorical(logits=logits[0])
            action = dist.sample()
            result = env.step(action)
            storage.add(step, obs, action, dist.log_prob(action), value[0], result.reward,
                        result.terminated | result.truncated)
            obs = result.obs
    assert storage.starts[1:].any(dim=1).sum() >= 3, "the rollout should hold episode starts to reset at"
    idx = torch.tensor([4, 1, 3])
    logits, values, _ = model(env.windows(storage.rows[:, idx]), storage.portfolio[:, idx], storage.mask[:, idx],
                              storage.starts[:, idx], tuple(s[:, idx] for s in storage.initial_state))
    logprob = torch.distributions.Categorical(logits=logits).log_prob(storage.actions[:, idx])
    torch.testing.assert_close(logprob, storage.logprobs[:, idx], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(values, storage.values[:, idx], rtol=1e-5, atol=1e-5)
    assert not storage.mask[:, idx].gather(-1, storage.actions[:, idx, None]).eq(False).any(), "masked sampled"


def test_learning_rate_warms_up_then_decays_linearly():
    from clstm_ppo.agent.ppo import lr_factor
    from clstm_ppo.config import PPOConfig

    linear = PPOConfig(lr_schedule="linear", warmup_updates=4)
    assert [lr_factor(u, 100, linear) for u in (0, 1, 3)] == pytest.approx([0.25, 0.5 * 0.99, 0.97])
    assert lr_factor(50, 100, linear) == pytest.approx(0.5) and lr_factor(100, 100, linear) == 0.0
    constant = PPOConfig(lr_schedule="constant")
    assert {lr_factor(u, 10, constant) for u in range(20)} == {1.0}
