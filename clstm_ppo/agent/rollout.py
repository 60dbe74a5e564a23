"""Collecting one rollout: every copy steps ``num_steps`` times under the current
policy, no gradients."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from clstm_ppo.agent.model import State
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.storage import RolloutStorage
from clstm_ppo.config import PPOConfig
from clstm_ppo.data.windows import MarketWindows
from clstm_ppo.env import BatchedOptionsEnv, Observation

ENCODE_CHUNK = 4096  # windows per encoder call when caching bar codes: ~5 MB of input at TW 30


@torch.no_grad()
def bar_codes(
    model: nn.Module, windows: MarketWindows, decisions: int, precision: Precision
) -> Tensor | None:
    """The encoder's code of every observable bar, by flat row; None when that costs
    more than ``decisions``.

    The encoder sees a bar's window and nothing else, and the weights are fixed during a
    rollout, so each bar needs encoding once per rollout, not once per copy and step: in a few
    large batches instead of num_steps small ones, and with no window gathered per step. Worth
    it while the split has no more bars than the rollout has decisions (the embedded S&P 500 and
    the synthetic default).
    """
    rows = windows.observable_rows()
    if len(rows) > decisions:
        return None
    codes = None
    with precision.autocast():
        for chunk in rows.split(ENCODE_CHUNK):
            code = model.encoder(windows.gather(chunk)).float()
            if codes is None:  # the code's width is the encoder's (it differs between agent kinds)
                codes = torch.zeros(
                    windows.n_symbols * windows.n_bars, code.shape[-1], device=code.device
                )
            codes[chunk] = code
    return codes


def sample_actions(logits: Tensor, uniform: Tensor) -> Tensor:
    """Draw one action per row of (N, A) ``logits`` by inverting its categorical CDF at the
    row's ``uniform`` in [0, 1): the same law as ``Categorical.sample`` from random numbers
    drawn beforehand, so a rollout draws all of its numbers in one call and a compiled or
    captured step holds no generator.

    The action is the first whose CDF exceeds the target. A masked action has zero mass, so the
    CDF does not rise there and no target picks it, u = 0 included; the target is kept strictly
    below the total, which a u next to 1 times the total can round up to, so the last valid action
    always exceeds it."""
    cdf = torch.softmax(logits, dim=-1).cumsum(dim=-1)
    total = cdf[:, -1:]
    target = torch.minimum(
        uniform.unsqueeze(-1) * total, torch.nextafter(total, torch.zeros_like(total))
    )
    return (cdf <= target).sum(dim=-1)


def action_logprob(logits: Tensor, action: Tensor) -> Tensor:
    """(N,) log-probability of each row's ``action`` under its (N, A) ``logits``:
    ``Categorical.log_prob``'s arithmetic, without the distribution object (whose argument checks
    would sync the host)."""
    normalised = logits - logits.logsumexp(dim=-1, keepdim=True)
    return normalised.gather(-1, action.unsqueeze(-1)).squeeze(-1)


def policy_step(
    model: nn.Module, obs: Observation, lstm_state: State, codes: Tensor | None
) -> tuple[Tensor, Tensor, State]:
    """The rollout's forward for one step of every copy, from cached bar codes
    when there are some."""
    args = (obs.portfolio[None], obs.mask[None], obs.start[None], lstm_state)
    if codes is None:
        return model(obs.market[None], *args)
    return model.decide(codes.index_select(0, obs.row)[None], *args)


@torch.no_grad()
def collect(
    model: nn.Module,
    env: BatchedOptionsEnv,
    storage: RolloutStorage,
    obs: Observation,
    lstm_state: State,
    precision: Precision,
    cfg: PPOConfig,
    codes: Tensor | None,
    act: Callable[[Observation], Tensor] | None = None,
) -> tuple[Observation, State]:
    """Fill ``storage`` with one rollout from ``obs``; returns the next observation and the carried
    LSTM state. The episodes that ended are summed in the env (``env.take_episode_sums``). ``act``:
    another policy's actions (a rule being cloned) in place of the model's draws; the model still
    gives the stored values and log-probs."""
    storage.initial_state = tuple(x.clone() for x in lstm_state)
    # the rollout's draws, in one call
    uniforms = torch.rand(cfg.num_steps, env.num_envs, device=obs.row.device)
    for step in range(cfg.num_steps):
        with precision.autocast():
            logits, value, state = policy_step(model, obs, lstm_state, codes)
        # the carried state stays float32 under autocast
        lstm_state = tuple(x.float() for x in state)
        action = sample_actions(logits[0], uniforms[step]) if act is None else act(obs)
        result = env.step(action)
        storage.add(
            step,
            obs.row,
            obs.portfolio,
            obs.mask,
            obs.start,
            action,
            action_logprob(logits[0], action),
            value[0],
            result.reward,
            result.terminated | result.truncated,
            env.state.slot_pnl,
            env.state.slot_opened,
        )
        obs = result.obs
    # Bootstrap from the next observation without advancing the carried state.
    with precision.autocast():
        _, last_value, _ = policy_step(model, obs, lstm_state, codes)
    storage.finish(last_value[0].float(), cfg.gamma, cfg.gae_lambda)
    return obs, lstm_state
