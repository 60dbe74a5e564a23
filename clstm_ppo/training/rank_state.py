"""What differs between ranks at an update boundary: random streams, env copies and LSTM 2's carried
state; and what a rank keeps of the last boundary for the checkpoints rank 0 writes.

Rank 0 gathers every rank's copy each update so the checkpoints it writes resume every rank exactly;
on a resume each rank takes its own back when the run has the saved run's workers and copies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from clstm_ppo.distributed import DistContext
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.run_files.checkpoint import CheckpointManager
from clstm_ppo.run_files.run_state import RankState, RngState, RunState, State
from clstm_ppo.training.monitor import ResourceMonitor


def capture(
    env: BatchedOptionsEnv,
    lstm_state: State,
    portfolio: torch.Tensor,
    minibatches: torch.Generator,
    device: torch.device,
) -> RankState:
    """This rank's random streams, env copies, carried LSTM state and the portfolio features its
    next decision reads, on the CPU. The features are saved, not recomputed on a resume: a compiled
    env step computes them in another operation order than the eager code would, and a last-bit
    difference would part the runs."""
    rng = RngState(
        torch.get_rng_state(),
        np.random.get_state(),
        random.getstate(),
        minibatches.get_state(),
        torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    )
    return RankState(
        rng, env.state_dict(), (lstm_state[0].cpu(), lstm_state[1].cpu()), portfolio.cpu()
    )


def saved_for_this_rank(state: RunState, ctx: DistContext, num_envs: int) -> RankState | None:
    """This rank's saved state in checkpoint ``state``, when its workers and copies
    match this launch's."""
    if not state.ranks:
        return None  # written between output.rank_state_every's saves
    if (
        state.world_size != ctx.world_size
        or state.num_envs != num_envs
        or len(state.ranks) != ctx.world_size
    ):
        return None  # also a multi-worker checkpoint from before ranks > 0 were saved
    return state.ranks[ctx.rank]


def restore(
    mine: RankState, env: BatchedOptionsEnv, minibatches: torch.Generator, device: torch.device
) -> State | None:
    """Put ``mine`` (from ``saved_for_this_rank``) back and return the carried LSTM state, or do
    nothing and return None when the env copies cannot continue (another env layout or another
    device's stream)."""
    if not env.fits(mine.env):
        return None
    rng = mine.rng
    torch.set_rng_state(rng.torch)
    if rng.cuda is not None and device.type == "cuda":
        torch.cuda.set_rng_state(rng.cuda, device)
    np.random.set_state(rng.numpy)
    random.setstate(rng.python)
    minibatches.set_state(rng.minibatches)
    env.load_state_dict(mine.env)
    return mine.lstm_state[0].to(device), mine.lstm_state[1].to(device)


@dataclass
class Boundary:
    """What a rank keeps of the last update boundary: on rank 0 every other rank's state (every
    ``output.rank_state_every`` updates), every rank's GPU readings and the metrics at a new best
    whose best_*.pt are due; on every rank whether this boundary's checkpoints carry the ranks'
    states (so all join a forced gather), its GPU monitor, and the run folder's checkpoint files."""

    checkpoints: CheckpointManager
    resources: ResourceMonitor  # every rank reads its own GPU; rank 0 logs them all
    other_ranks: list[RankState] = field(default_factory=list)  # ranks 1.., on rank 0
    with_rank_states: bool = True  # whether this boundary's checkpoints carry the ranks' states
    improved: tuple[str, ...] = ()  # metrics at a new best since the last checkpoint
    rank_gpus: list[dict[str, float]] = field(default_factory=list)
    gpu_notes: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, run_dir: Path, keep_last: int, device: torch.device) -> Boundary:
        return cls(CheckpointManager(run_dir, keep_last), ResourceMonitor(device))
