"""Rollout storage on the device, and GAE.

Market windows are not stored: each step keeps its bar's flat index (``row``)
and the update gathers the windows again, so memory is O(L x N) not O(L x N x TW x F).
"""

from __future__ import annotations

import torch
from torch import Tensor

from clstm_ppo.agent.model import State
from clstm_ppo.config import Config


def compute_gae(
    rewards: Tensor, values: Tensor, dones: Tensor, last_value: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
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


def position_credit(
    rewards: Tensor, slot_pnl: Tensor, opened: Tensor, dones: Tensor, gamma: float, scale: float
) -> Tensor:
    """Rewards (L, N) with each step's option P&L moved to the step that opened the option
    (``ppo.credit: position``; docs/TRAINING.md, "Credit").

    ``slot_pnl`` (L, 2, P, N) is each step's P&L per slot in dollars, [0] of the position the slot
    held before the step's fill and [1] of the one opened at it (``opened`` (L, P, N)); ``scale``
    turns dollars into reward. A step keeps its reward less its options' P&L (carry, shares,
    penalties) and gains, for each option it opened, that option's P&L over the rest of its life
    within the rollout, discounted by ``gamma`` to the step. An episode's end (``dones``) ends its
    positions; P&L of options opened before the rollout is nobody's here, and an option still open
    at its end is credited what it made so far. With every option opened and closed inside the
    rollout and gamma 1, the rewards' sum is unchanged.
    """
    credit = torch.zeros_like(rewards)
    # (P, N) P&L after step t of the position each slot holds then
    ahead = torch.zeros_like(slot_pnl[0, 0])
    for step in reversed(range(rewards.shape[0])):
        # the next episode's positions are others
        ahead = ahead * (~dones[step]).to(ahead.dtype).unsqueeze(0)
        fresh = opened[step].to(ahead.dtype)
        credit[step] = (fresh * (slot_pnl[step, 1] + gamma * ahead)).sum(0)
        # before the fill the slot held another one
        ahead = slot_pnl[step, 0] + gamma * ahead * (1.0 - fresh)
    return rewards + scale * (credit - slot_pnl.sum((1, 2)))


def mean_variance(
    rewards: Tensor, slot_pnl: Tensor, risk_aversion: float, reward_unit: float
) -> tuple[Tensor, Tensor]:
    """Rewards (L, N) as the utility x - risk_aversion / 2 * x^2 of each bar's return x = reward /
    ``reward_unit`` (env.reward_scale: x is a share of initial cash), in reward units
    (``ppo.risk_aversion``; docs/TRAINING.md, "Risk"); and ``slot_pnl`` (L, 2, P, N) times the same
    factor 1 - risk_aversion / 2 * x, so each position bears the part of the bar's charge its P&L
    made (sum_i p_i * x = x^2, the charge split by each part's covariance with the bar) and position
    credit moves that part with the P&L."""
    keep = 1.0 - 0.5 * risk_aversion * rewards / reward_unit
    return rewards * keep, slot_pnl * keep[:, None, None, :]


def credit_settings(cfg: Config) -> dict[str, float]:
    """``RolloutStorage``'s credit arguments for a run's settings: slots and reward per dollar
    under ``ppo.credit: position``, and the learner's risk aversion with the reward of a gain of
    the whole initial cash."""
    risk = {"risk_aversion": cfg.ppo.risk_aversion, "reward_unit": cfg.env.reward_scale}
    if cfg.ppo.credit != "position":
        return risk
    return {
        "slots": cfg.env.max_positions,
        "credit_scale": cfg.env.reward_scale / cfg.env.initial_cash,
        **risk,
    }


class RolloutStorage:
    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        portfolio_dim: int,
        n_actions: int,
        device: torch.device,
        slots: int = 0,
        credit_scale: float = 0.0,
        risk_aversion: float = 0.0,
        reward_unit: float = 1.0,
    ):
        """``slots`` > 0 (env.max_positions), with ``credit_scale`` (reward per dollar): rewards
        credited by position (``position_credit``), from each step's slot P&L; 0: the env's rewards
        as they are. ``risk_aversion`` > 0, with ``reward_unit`` (the reward of a gain of the whole
        initial cash): rewards as their mean-variance utility (``mean_variance``) first."""

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
        # LSTM 2's state before step 0: minibatches replay from it
        self.initial_state: State | None = None
        # A prior rule's action at each decision and the weight of its penalty this update
        # (prior.kl): read by the update's loss; hold and 0 without a prior.
        self.prior_actions = buf(dtype=torch.long)
        self.prior_coef = torch.zeros((), device=device)
        self.num_steps, self.num_envs = num_steps, num_envs
        self.credit_scale = credit_scale
        self.risk_aversion, self.reward_unit = risk_aversion, reward_unit
        # ppo.credit position: each step's P&L per slot (L, 2, P, N) and
        # where it opened an option (L, P, N)
        self.slot_pnl = torch.zeros(num_steps, 2, slots, num_envs, device=device)
        self.slot_opened = torch.zeros(num_steps, slots, num_envs, dtype=torch.bool, device=device)

    @property
    def by_position(self) -> bool:
        """Whether rewards are credited by position (``position_credit``)."""
        return self.slot_pnl.shape[2] > 0

    def add(
        self,
        step: int | Tensor,
        row: Tensor,
        portfolio: Tensor,
        mask: Tensor,
        start: Tensor,
        action: Tensor,
        logprob: Tensor,
        value: Tensor,
        reward: Tensor,
        done: Tensor,
        slot_pnl: Tensor | None = None,
        slot_opened: Tensor | None = None,
    ) -> None:
        """Write one decision of every copy at row ``step``: an int, or a (1,) long tensor on the
        device (a compiled or captured rollout's index, read without a host sync); with position
        credit, the env state's slot P&L."""
        values = (row, portfolio, mask, start, action, logprob, value, reward, done)
        buffers = (
            self.rows,
            self.portfolio,
            self.mask,
            self.starts,
            self.actions,
            self.logprobs,
            self.values,
            self.rewards,
            self.dones,
        )
        if self.by_position:
            values, buffers = (
                (*values, slot_pnl, slot_opened),
                (*buffers, self.slot_pnl, self.slot_opened),
            )
        if not isinstance(step, Tensor):
            for buffer, value in zip(buffers, values, strict=True):
                buffer[step] = value
            return
        for buffer, value in zip(buffers, values, strict=True):
            buffer.index_copy_(0, step, value.unsqueeze(0).to(buffer.dtype))

    def finish(self, last_value: Tensor, gamma: float, lam: float) -> None:
        rewards, slot_pnl = self.rewards, self.slot_pnl
        if self.risk_aversion > 0:  # at 0 the rewards stay bit for bit as they were
            rewards, slot_pnl = mean_variance(
                rewards, slot_pnl, self.risk_aversion, self.reward_unit
            )
        if self.by_position:
            rewards = position_credit(
                rewards, slot_pnl, self.slot_opened, self.dones, gamma, self.credit_scale
            )
        self.advantages, self.returns = compute_gae(
            rewards, self.values, self.dones, last_value, gamma, lam
        )
