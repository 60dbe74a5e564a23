"""The gymnasium wrapper: the batched env's steps one copy at a time, the env checker, and SB3 training on it."""
import gymnasium
import numpy as np
import pytest
import torch
from env_trajectory import random_valid
from gymnasium.utils.env_checker import check_env

import clstm_ppo  # noqa: F401  (registers the gymnasium id)
from clstm_ppo.config import EnvConfig, MarketConfig
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.env.gym_env import OptionsTradingEnv
from clstm_ppo.market.observed import observed_feature_names


def test_gym_wrapper_matches_the_batched_env(synthetic_data):
    gym_env = OptionsTradingEnv(synthetic_data, split="train", dtype="float64", episode_length=60)
    batched = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), EnvConfig(dtype="float64",
                                episode_length=60), 1, seed=7, autoreset=False)
    obs, info = gym_env.reset(seed=7)
    b_obs = batched.reset()
    gen = torch.Generator().manual_seed(2)
    for _ in range(60):
        assert np.array_equal(obs["market"], b_obs.market[0].numpy())
        assert np.array_equal(obs["portfolio"], b_obs.portfolio[0].numpy())
        assert np.array_equal(info["action_mask"], b_obs.mask[0].numpy())
        action = random_valid(b_obs.mask, gen)
        obs, reward, terminated, truncated, info = gym_env.step(int(action[0]))
        result = batched.step(action)
        b_obs = result.obs
        assert reward == result.reward[0].item()
        if terminated or truncated:
            assert "episode_stats" in info
            break
    assert terminated or truncated


# The checker advises finite Box bounds; normalised features and portfolio values are unbounded by nature.
@pytest.mark.filterwarnings("ignore:.*Box observation space (minimum|maximum) value is:UserWarning")
def test_gym_wrapper_passes_the_env_checker_and_is_registered():
    env = gymnasium.make("clstm_ppo/OptionsTrading-v0", data="synthetic", window=10)
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert obs["market"].shape == (10, len(observed_feature_names(True)))  # the bar features and the option market's
    grid = len(MarketConfig().moneyness) * len(MarketConfig().expiries_days)
    # hold, buy and sell calls and puts, three targets for the underlying, three closes
    assert env.action_space.n == 1 + 4 * grid + len(MarketConfig().stock_targets) + 3 == 31
    assert info["action_mask"][0]


def test_stable_baselines3_trains_on_the_gymnasium_wrapper(synthetic_data):
    from sb3_contrib import MaskablePPO

    env = OptionsTradingEnv(synthetic_data, split="train", episode_length=40)
    model = MaskablePPO("MultiInputPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(128)  # MaskablePPO reads env.action_masks(): masked actions are never sampled
    obs, info = env.reset(seed=1)
    action, _ = model.predict(obs, action_masks=info["action_mask"], deterministic=True)
    assert info["action_mask"][int(action)]
