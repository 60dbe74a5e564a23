"""The run's rollouts: each fills the storage with ``ppo.num_steps`` decisions of every env copy
and carries the observation and LSTM 2's state on to the next (docs/TRAINING.md, "Compiled and
captured paths")."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from clstm_ppo.agent import RolloutStorage, rollout
from clstm_ppo.agent.fused_rollout import FusedRollout
from clstm_ppo.agent.model import State
from clstm_ppo.agent.precision import Precision
from clstm_ppo.config import Config
from clstm_ppo.env import BatchedOptionsEnv, Observation
from clstm_ppo.training.plan import ExecutionPlan


class Rollout:
    """One rollout per ``collect()``, in the form the plan names: eager, or each decision one
    compiled graph (replayed as a CUDA graph where captured: ``agent/fused_rollout.py``). The
    compiled decision reads the encoder's per-bar codes, so a split with more bars than a rollout
    has decisions runs eagerly."""

    def __init__(
        self,
        model: nn.Module,
        env: BatchedOptionsEnv,
        storage: RolloutStorage,
        precision: Precision,
        plan: ExecutionPlan,
        cfg: Config,
        obs: Observation,
        lstm_state: State,
    ):
        """``obs`` and ``lstm_state``: where the env copies and LSTM 2 stand before
        the first rollout."""
        self.model, self.env, self.storage, self.precision = model, env, storage, precision
        self.ppo, self.decisions = cfg.ppo, cfg.train.num_envs * cfg.ppo.num_steps
        self.fused = (
            FusedRollout(model, env, storage, precision, plan.rollout_graphs)
            if plan.rollout == "fused"
            else None
        )
        self.path = "eager"  # how the last rollout's decisions ran
        self.obs, self.lstm_state = obs, lstm_state

    def bar_codes(self) -> torch.Tensor | None:
        """The encoder's code of every observable bar, when there are no more of
        them than decisions."""
        return rollout.bar_codes(
            self.model, self.env.market_windows, self.decisions, self.precision
        )

    def policy(
        self, obs: Observation, codes: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, State]:
        """The rollout's forward for one step of every copy from the carried state (logits,
        value, next state)."""
        return rollout.policy_step(self.model, obs, self.lstm_state, codes)

    def collect(self) -> np.ndarray:
        """One rollout into the storage, carrying the observation and LSTM state on; the sums of the
        full-length episodes that ended (``env.state.EPISODE_SUMS``)."""
        codes = self.bar_codes()
        if self.fused is not None and codes is not None:
            self.obs, self.lstm_state = self.fused.collect(
                self.obs, self.lstm_state, codes, self.ppo.gamma, self.ppo.gae_lambda
            )
            self.path = self.fused.path
        else:
            self.obs, self.lstm_state = rollout.collect(
                self.model,
                self.env,
                self.storage,
                self.obs,
                self.lstm_state,
                self.precision,
                self.ppo,
                codes,
            )
        return self.env.take_episode_sums()
