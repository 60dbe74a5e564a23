"""A gymnasium ``Env`` over one copy of the batched environment, for any gymnasium or SB3 agent.

Observations are a Dict of ``market`` (TW, F) and ``portfolio``; the valid-action
mask is in ``info["action_mask"]`` and from ``action_masks()`` (sb3-contrib's
MaskablePPO convention). It steps the batched env with N = 1, so both give the
same trajectory for the same seed and actions.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from clstm_ppo.config import Config, DataConfig, EnvConfig, MarketConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.env.observation import PORTFOLIO_FEATURES, Observation
from clstm_ppo.env.options_env import BatchedOptionsEnv
from clstm_ppo.market.observed import observed_market_data


class OptionsTradingEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(
        self,
        data: MarketData | str = "sp500",
        split: str = "train",
        window: int | None = None,
        market: MarketConfig | None = None,
        **env_fields: Any,
    ):
        if isinstance(data, str):
            data_cfg = DataConfig(source=data)
            if window is not None:
                data_cfg.window = window
            data = observed_market_data(Config(data=data_cfg, market=market or MarketConfig()))
        elif window is not None and window != data.window:
            raise ValueError(
                f"window={window} differs from the data's window {data.window}; "
                "build the data with it"
            )
        self.data, self.split = data, split
        self.market_cfg = market or MarketConfig()
        self.env_cfg = EnvConfig(**env_fields)
        self._batched: BatchedOptionsEnv | None = None
        self._make(seed=0)
        n_features = len(data.feature_names)
        self.observation_space = gym.spaces.Dict(
            {
                "market": gym.spaces.Box(-np.inf, np.inf, (data.window, n_features), np.float32),
                "portfolio": gym.spaces.Box(
                    -np.inf, np.inf, (len(PORTFOLIO_FEATURES),), np.float32
                ),
            }
        )
        self.action_space = gym.spaces.Discrete(self._batched.actions.n)

    def _make(self, seed: int) -> None:
        self._batched = BatchedOptionsEnv(
            self.data,
            self.split,
            self.market_cfg,
            self.env_cfg,
            num_envs=1,
            device="cpu",
            seed=seed,
            autoreset=False,
        )

    @staticmethod
    def _convert(obs: Observation) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        out = {"market": obs.market[0].numpy(), "portfolio": obs.portfolio[0].numpy()}
        return out, {"action_mask": obs.mask[0].numpy()}

    # gymnasium's signature
    def reset(self, *, seed: int | None = None, options: dict | None = None):  # noqa: ARG002
        super().reset(seed=seed)
        if seed is not None:
            self._make(seed)  # the batched env's generator is the single source of randomness
        return self._convert(self._batched.reset())

    def step(self, action):
        result = self._batched.step(torch.as_tensor([int(action)]))
        obs, info = self._convert(result.obs)
        if result.episodes is not None:
            info["episode_stats"] = {k: v[0] for k, v in result.episodes.items()}
        return (
            obs,
            float(result.reward[0]),
            bool(result.terminated[0]),
            bool(result.truncated[0]),
            info,
        )

    def action_masks(self) -> np.ndarray:
        return self._batched.action_mask()[0].numpy()
