"""Rollout storage on the device, and GAE.

Market windows are not stored: each step keeps its bar's flat index (``row``)
and the update gathers the windows again, so memory is O(L x N) not O(L x N x TW x F).
"""
from __future__ import annotations

import torch
from torch import Tensor

from clstm_ppo.agent.model import State


def compute_gae(rewards: Tensor, values: Tensor, dones: Tensor, last_value: Tensor,
                gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Advantages and returns (L, N). ``dones[l]``: the episode ended with step l's action.

    Time limits count as terminal: the observation holds the episode's progress, so the
    value function knows how many bars are left (Pardo et al., 2018).
    """
    advantages = torch.zeros_like(rewards)
    last_gae = torch.zeros_like(last_value)
    for step in reversed(range(rewards.shape[0])):
        next_value = last_value if step == rewards.shape[0] - 1 else values[step + 1]
        not_done = 1.0 - dones[step].to(rewards.dtype)
        delta = rewards[step] + gamma * next_value * not_done - values[step]
        last_gae = delta + gamma * lam * not_done * last_gae
        advantages[step] = last_gae
    return advantages, advantages + values


class RolloutStorage:
    def __init__(self, num_steps: int, num_envs: int, portfolio_dim: int, n_actions: int, device: torch.device):
        def buf(*shape, dtype=torch.float32):
            return torch.zeros(num_steps, num_envs, *shape, dtype=dtype, device=device)

        self.rows = buf(dtype=torch.long)
        self.portfolio = buf(portfolio_dim)
        self.mask = buf(n_actions, dtype=torch.bool)
        self.starts = buf(dtype=torch.bool)
        self.actions = buf(dtype=torch.long)
        self.logprobs, self.values, self.rewards = buf(), buf(), buf()
        self.dones = buf(dtype=torch.bool)
        self.advantages, self.returns = buf(), buf()
        self.initial_state: State | None = None  # LSTM 2's state before step 0: minibatches replay from it
        # A prior rule's action at each decision and the weight of its penalty this update (train.prior_kl): read by
        # the update's loss; hold and 0 without a prior.
        self.prior_actions = buf(dtype=torch.long)
        self.prior_coef = torch.zeros((), device=device)
        self.num_steps, self.num_envs = num_steps, num_envs

    def add(self, step: int | Tensor, row: Tensor, portfolio: Tensor, mask: Tensor, start: Tensor, action: Tensor,
            logprob: Tensor, value: Tensor, reward: Tensor, done: Tensor) -> None:
        """Write one decision of every copy at row ``step``: an int, or a (1,) long tensor on the device (a compiled
        or captured rollout's index, read without a host sync)."""
        values = (row, portfolio, mask, start, action, logprob, value, reward, done)
        buffers = (self.rows, self.portfolio, self.mask, self.starts, self.actions, self.logprobs, self.values,
                   self.rewards, self.dones)
        if not isinstance(step, Tensor):
            for buffer, value in zip(buffers, values, strict=True):
                buffer[step] = value
            return
        for buffer, value in zip(buffers, values, strict=True):
            buffer.index_copy_(0, step, value.unsqueeze(0).to(buffer.dtype))

    def finish(self, last_value: Tensor, gamma: float, lam: float) -> None:
        self.advantages, self.returns = compute_gae(self.rewards, self.values, self.dones, last_value, gamma, lam)
