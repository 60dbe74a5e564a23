"""The rollout as one function per decision: the policy's forward (LSTM 2 as a cell on its own
weights), the draw, the env step and the storage write, with no host sync and no data-dependent
shape (docs/ENVIRONMENT.md).

Compiled (``torch.compile(fullgraph=True, dynamic=False)``) a decision is one graph on any device;
on CUDA with ``launch.cuda_graphs`` that graph is also captured once in a CUDA graph and replayed
``num_steps`` times a rollout, so a decision is one launch. ``rollout.collect`` is the eager twin
the tests compare this path to: the same draws (``rollout.sample_actions`` from one call's uniforms)
and the same env step, so both fill the storage alike.

The per-bar codes of LSTM 1 are what the decision reads (``rollout.bar_codes``); a rollout
without them (a split with more bars than the rollout has decisions, so never at GPU sizes)
takes the eager path.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn
from torch.utils._pytree import register_dataclass, tree_flatten, tree_map

from clstm_ppo.agent.model import State
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.rollout import action_logprob, sample_actions
from clstm_ppo.agent.storage import RolloutStorage
from clstm_ppo.config import first_line
from clstm_ppo.device import compile_graph, cuda_graph_capture
from clstm_ppo.env import BatchedOptionsEnv, Observation
from clstm_ppo.env import step as pure
from clstm_ppo.env.state import EnvSpec, EnvState


@dataclass(eq=False)
class Carry:
    """What one decision hands the next: the env's state, LSTM 2's state, the observation
    and the storage row."""

    env: EnvState
    h: Tensor  # (1, N, H) LSTM 2's carried state, float32
    c: Tensor
    portfolio: Tensor  # (N, len(PORTFOLIO_FEATURES)) observed at the env's current bar
    row: Tensor  # (N,) flat index of that bar: its code is LSTM 1's part of the observation
    start: Tensor  # (N,) bool: that bar begins an episode
    step: Tensor  # (1,) long: the storage row this decision writes


register_dataclass(Carry)
Decision = Callable[[Carry, Tensor, Tensor], Carry]


def decision(
    model: nn.Module,
    spec: EnvSpec,
    precision: Precision,
    storage: RolloutStorage,
    carry: Carry,
    codes: Tensor,
    uniforms: Tensor,
) -> Carry:
    """One decision of every copy from ``carry``: act on the observation, step the env, write
    storage row ``carry.step``. ``codes`` (rows, code) are LSTM 1's per-bar codes;
    ``uniforms`` (num_steps, N) the rollout's draws. Changes nothing but the storage row;
    returns the next carry."""
    with precision.autocast():
        logits, value, (h, c) = model.decide_one(
            codes.index_select(0, carry.row),
            carry.portfolio,
            carry.env.mask,
            carry.start,
            (carry.h, carry.c),
        )
    action = sample_actions(logits, uniforms.index_select(0, carry.step)[0])
    out = pure.step(spec, carry.env, action)
    storage.add(
        carry.step,
        carry.row,
        carry.portfolio,
        carry.env.mask,
        carry.start,
        action,
        action_logprob(logits, action),
        value,
        out.reward,
        out.terminated | out.truncated,
        out.state.slot_pnl,
        out.state.slot_opened,
    )
    return Carry(out.state, h.float(), c.float(), out.portfolio, out.row, out.start, carry.step + 1)


class CapturedDecision:
    """``step`` captured in one CUDA graph over static buffers: each ``__call__`` copies the
    rollout's carry, codes and draws in, replays the graph ``n`` times (each replay writes its next
    carry over its input) and returns a copy of the last carry. Only CUDA captures; ``FusedRollout``
    builds this on CUDA alone."""

    def __init__(self, step: Decision, carry: Carry, codes: Tensor, uniforms: Tensor):
        self.carry = _clone(carry)
        self.codes, self.uniforms = codes.clone(), uniforms.clone()
        # compile and let cuBLAS/inductor allocate before the capture (CUDA's rule)
        warm_up = torch.cuda.Stream()
        warm_up.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(warm_up):
            for _ in range(2):
                _copy_into(self.carry, step(_clone(carry), self.codes, self.uniforms))
        torch.cuda.current_stream().wait_stream(warm_up)
        self.graph = torch.cuda.CUDAGraph()
        with cuda_graph_capture(self.graph):
            _copy_into(self.carry, step(self.carry, self.codes, self.uniforms))

    def fits(self, carry: Carry, codes: Tensor) -> bool:
        return self.codes.shape == codes.shape and self.carry.h.shape == carry.h.shape

    def __call__(self, carry: Carry, codes: Tensor, uniforms: Tensor, n: int) -> Carry:
        _copy_into(self.carry, carry)
        self.codes.copy_(codes)
        self.uniforms.copy_(uniforms)
        for _ in range(n):
            self.graph.replay()
        return _clone(self.carry)  # the next rollout's replays overwrite the static buffers


class FusedRollout:
    """The trainer's rollout when the env step is compiled (``launch.compile_loop``): one
    compiled decision per step, and on CUDA with ``launch.cuda_graphs`` one captured graph
    replayed per step."""

    def __init__(
        self,
        model: nn.Module,
        env: BatchedOptionsEnv,
        storage: RolloutStorage,
        precision: Precision,
        cuda_graphs: bool,
        compile: bool = True,
    ):
        self.bound = partial(decision, model, env.spec, precision, storage)
        # dynamo refuses to look at an nn.LSTM unless allow_rnn is set; the
        # decision only reads LSTM 2's weights.
        self.step = (
            compile_graph(self.bound, "rollout decision", allow_rnn=True) if compile else self.bound
        )  # eager: the tests' op-by-op twin
        self.capture = cuda_graphs and compile and env.device.type == "cuda"
        self.captured: CapturedDecision | None = None
        self.model, self.env, self.storage, self.precision = model, env, storage, precision

    @property
    def path(self) -> str:
        """How the decisions ran: "captured" (one CUDA graph replay each), "compiled" or "eager"."""
        return (
            "captured"
            if self.captured is not None
            else "compiled"
            if self.step is not self.bound
            else "eager"
        )

    @torch.no_grad()
    def collect(
        self, obs: Observation, lstm_state: State, codes: Tensor, gamma: float, lam: float
    ) -> tuple[Observation, State]:
        """``rollout.collect`` from the same draws: fill the storage, leave the env at the rollout's
        end; returns the next observation and the carried LSTM state."""
        storage, env, n = self.storage, self.env, self.storage.num_steps
        storage.initial_state = tuple(x.clone() for x in lstm_state)
        # the rollout's draws, as collect takes them
        uniforms = torch.rand(n, env.num_envs, device=obs.row.device)
        carry = Carry(
            env.state,
            lstm_state[0],
            lstm_state[1],
            obs.portfolio,
            obs.row,
            obs.start,
            torch.zeros(1, dtype=torch.long, device=obs.row.device),
        )
        if self.capture and (self.captured is None or not self.captured.fits(carry, codes)):
            try:
                self.captured = CapturedDecision(self.step, carry, codes, uniforms)
            except RuntimeError as err:
                # a capture CUDA refuses: train on, compiled, and say why once
                self.capture, self.captured = False, None
                warnings.warn(
                    f"CUDA graph capture of the rollout decision failed ({first_line(err)}); the "
                    "rollout runs compiled without it (set launch.cuda_graphs off "
                    "to skip the attempt)",
                    stacklevel=2,
                )
        if self.captured is not None:
            carry = self.captured(carry, codes, uniforms, n)
        else:
            for _ in range(n):
                carry = self.step(carry, codes, uniforms)
        env.state = carry.env
        next_obs = Observation(
            carry.portfolio, carry.env.mask, carry.row, carry.start, env.market_windows
        )
        with self.precision.autocast():
            # bootstrap from the next observation without advancing the carried state
            _, last_value, _ = self.model.decide_one(
                codes.index_select(0, carry.row),
                carry.portfolio,
                carry.env.mask,
                carry.start,
                (carry.h, carry.c),
            )
        storage.finish(last_value.float(), gamma, lam)
        return next_obs, (carry.h, carry.c)


def _clone(carry: Carry) -> Carry:
    """A carry of fresh tensors with ``carry``'s values."""
    return tree_map(Tensor.clone, carry)


def _copy_into(target: Carry, source: Carry) -> None:
    """Every tensor of ``target`` set to ``source``'s, in place (one multi-tensor copy)."""
    torch._foreach_copy_(tree_flatten(target)[0], tree_flatten(source)[0])
