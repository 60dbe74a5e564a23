"""What differs between ranks at an update boundary: random streams, env copies and LSTM 2's carried state.

Rank 0 gathers every rank's copy each update so the checkpoints it writes resume every rank exactly; on a
resume each rank takes its own back when the run has the saved run's workers and copies.
"""
from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from clstm_ppo.distributed import DistContext
from clstm_ppo.env import BatchedOptionsEnv

State = tuple[torch.Tensor, torch.Tensor]


def capture(env: BatchedOptionsEnv, lstm_state: State, portfolio: torch.Tensor, minibatches: torch.Generator,
            device: torch.device) -> dict[str, Any]:
    """This rank's random streams, env copies, carried LSTM state and the portfolio features its next decision
    reads, on the CPU. The features are saved, not recomputed on a resume: a compiled env step computes them in
    another operation order than the eager code would, and a last-bit difference would part the runs."""
    rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
           "minibatches": minibatches.get_state()}
    if device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(device)
    return {"rng": rng, "env": env.state_dict(), "lstm_state": tuple(s.cpu() for s in lstm_state),
            "portfolio": portfolio.cpu()}


def saved_for_this_rank(state: dict[str, Any], ctx: DistContext, num_envs: int) -> dict[str, Any] | None:
    """This rank's saved state in checkpoint ``state``, when its workers and copies match this launch's."""
    world, others = ctx.world_size, state.get("other_ranks", [])
    if "env" not in state:
        return None  # written between train.rank_state_every's saves
    if state["world_size"] != world or state["num_envs"] != num_envs or len(others) != world - 1:
        return None  # also a multi-worker checkpoint from before ranks > 0 were saved
    return state if ctx.rank == 0 else others[ctx.rank - 1]


def restore(mine: dict[str, Any], env: BatchedOptionsEnv, minibatches: torch.Generator,
            device: torch.device) -> State | None:
    """Put ``mine`` (from ``saved_for_this_rank``) back and return the carried LSTM state, or do nothing and
    return None when the env copies cannot continue (another env layout or another device's stream)."""
    if not env.fits(mine["env"]):
        return None
    rng = mine["rng"]
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], device)
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    minibatches.set_state(rng["minibatches"])
    env.load_state_dict(mine["env"])
    return tuple(s.to(device) for s in mine["lstm_state"])
