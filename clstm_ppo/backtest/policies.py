"""The policies a walk can run: the agent (greedy), an ensemble of agents, and the benchmarks that
trade options through the same env.

A policy maps an observation and its carried state to one action per copy and the next state. Rules
read only what is known at the observation's bar (the raw features of its row), like the agent.
"""

from __future__ import annotations

import torch

from clstm_ppo.agent.model import ActorCritic, State
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.env import PORTFOLIO_FEATURES, ActionSpace, Observation

OPEN_SHARE = PORTFOLIO_FEATURES.index("open_share")


def agent_logits(model: ActorCritic, obs: Observation, state: State) -> tuple[torch.Tensor, State]:
    """(copies, actions) masked logits of ``model`` for one decision, and LSTM 2's next state."""
    logits, _, state = model(
        obs.market.unsqueeze(0),
        obs.portfolio.unsqueeze(0),
        obs.mask.unsqueeze(0),
        obs.start.unsqueeze(0),
        state,
    )
    return logits[0], state


def agent_policy(model: ActorCritic, num_envs: int, device: torch.device) -> tuple:
    """Greedy (argmax) actions of ``model``, carrying LSTM 2's state (an empty one
    for agent.kind mlp)."""

    def act(obs: Observation, state: State) -> tuple[torch.Tensor, State]:
        logits, state = agent_logits(model, obs, state)
        return logits.argmax(-1), state

    return act, model.initial_state(num_envs, device)


def ensemble_policy(models: list[ActorCritic], num_envs: int, device: torch.device) -> tuple:
    """Greedy actions of the mean of ``models``' action probabilities (the softmax of each one's
    masked logits), each model carrying its own LSTM 2 state; ties go to the first action, as argmax
    breaks them. The members read the same observation: evaluate --ensemble admits only checkpoints
    of one normaliser and walk (docs/BACKTEST.md, "Ensembles")."""

    def act(obs: Observation, states: list[State]) -> tuple[torch.Tensor, list[State]]:
        total, next_states = None, []
        for model, state in zip(models, states, strict=True):
            logits, state = agent_logits(model, obs, state)
            # In float64: float32 rounding can make two near-equal probabilities equal where the
            # logits still order them, and an ensemble of one must act as its model does.
            probs = torch.softmax(logits.double(), dim=-1)
            total = probs if total is None else total + probs
            next_states.append(state)
        return (total / len(models)).argmax(-1), next_states

    return act, [model.initial_state(num_envs, device) for model in models]


def random_policy(seed: int) -> tuple:
    """Uniform over the valid actions, from its own seeded generator."""

    def act(obs: Observation, gen: torch.Generator) -> tuple[torch.Tensor, torch.Generator]:
        return torch.multinomial(obs.mask.float().cpu(), 1, generator=gen).squeeze(-1).to(
            obs.mask.device
        ), gen

    return act, torch.Generator().manual_seed(seed)


def cash_policy() -> tuple:
    """Never trades."""
    return (
        lambda obs, _state: (
            torch.zeros(obs.mask.shape[0], dtype=torch.long, device=obs.mask.device),
            None,
        )
    ), None


def _atm_30_day(actions: ActionSpace) -> tuple[int, int]:
    """The chain point nearest the money and nearest 30 days to expiry."""
    m = min(range(len(actions.moneyness)), key=lambda i: abs(actions.moneyness[i] - 1.0))
    e = min(range(len(actions.expiries_days)), key=lambda i: abs(actions.expiries_days[i] - 30))
    return m, e


def _open_count(obs: Observation, max_positions: int) -> torch.Tensor:
    return (obs.portfolio[:, OPEN_SHARE] * max_positions).round().long()


def macd_rule(data: MarketData, actions: ActionSpace, max_positions: int) -> tuple:
    """Buy a 30-day at-the-money call when MACD crosses above its signal line (the histogram turns
    positive), a put when it crosses below, and close on the opposite cross. One action a bar: a
    reversal closes at the cross and buys the new side at the next bar."""
    macd = torch.as_tensor(data.raw_features[:, :, data.feature_names.index("macd")].reshape(-1))
    m, e = _atm_30_day(actions)
    call, put = actions.buy(True, m, e), actions.buy(False, m, e)

    def act(obs: Observation, pending: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        row = obs.row.cpu()
        now, before = macd.index_select(0, row), macd.index_select(0, (row - 1).clamp_min(0))
        signal = torch.where(
            (before <= 0) & (now > 0), call, torch.where((before >= 0) & (now < 0), put, 0)
        )
        pending = torch.zeros_like(row) if pending is None else pending
        # a new cross replaces any wish not yet bought
        pending = torch.where(signal > 0, signal, pending)
        holding = _open_count(obs, max_positions).cpu() > 0
        mask = obs.mask.cpu()
        can_buy = mask.gather(1, pending.unsqueeze(-1)).squeeze(-1) & (pending > 0)
        # A cross while holding closes first; a wish is bought once flat and the mask allows it.
        action = torch.where(
            (signal > 0) & holding,
            actions.close_all,
            torch.where(~holding & can_buy, pending, actions.hold),
        )
        pending = torch.where(action == pending, 0, pending)
        return action.to(obs.mask.device), pending

    return act, None


def long_straddle(actions: ActionSpace, max_positions: int) -> tuple:
    """Long volatility, rolled monthly: when flat, buy a 30-day at-the-money call, and the 30-day
    at-the-money put on the next bar (one order a bar), hold both to expiry, repeat."""
    m, e = _atm_30_day(actions)
    call, put = actions.buy(True, m, e), actions.buy(False, m, e)

    def act(obs: Observation, need_put: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        held = _open_count(obs, max_positions).cpu()
        need_put = torch.zeros_like(held, dtype=torch.bool) if need_put is None else need_put
        action = torch.where(
            held == 0, call, torch.where(need_put & (held == 1), put, actions.hold)
        )
        need_put = torch.where(held == 0, True, torch.where(action == put, False, need_put))
        return action.to(obs.mask.device), need_put

    return act, None
