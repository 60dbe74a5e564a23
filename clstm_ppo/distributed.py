"""Process-group context: rank, world size and the collectives the trainer uses.

With one worker every collective is the identity, so the trainer has a single
code path. Every rank calls every collective the same number of times.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.distributed as dist


class TrainingFailure(RuntimeError):
    """A stop every rank agreed on because training went wrong (e.g. a non-finite loss)."""


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return tensor
        out = tensor.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.all_reduce_sum(tensor) / self.world_size if self.enabled else tensor

    def average_gradients(self, module: torch.nn.Module) -> None:
        """Every rank's gradients replaced by their mean over the ranks, in one all-reduce: what DDP does during the
        backward, for an update that does not run through DDP's forward (``agent/static_update.py``)."""
        if not self.enabled:
            return
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        mean = self.all_reduce_mean(torch.cat([g.reshape(-1) for g in grads]))
        torch._foreach_copy_(grads, [part.view_as(g) for part, g in zip(mean.split([g.numel() for g in grads]),
                                                                          grads, strict=True)])

    def gather_to_main(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable, on the CPU) in rank order on rank 0; an empty list elsewhere."""
        if not self.enabled:
            return [obj]
        gathered: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, gathered, dst=0)  # under NCCL the bytes travel through this rank's current GPU
        return gathered or []

    def broadcast_parameters(self, module: torch.nn.Module) -> None:
        """Give every rank rank 0's weights (after work each rank did alone, e.g. pretraining)."""
        if self.enabled:
            for param in module.parameters():
                dist.broadcast(param.data, src=0)


class RankSeeds(NamedTuple):
    env: int  # the rank's env copies (episode starts, underlyings)
    torch: int  # its action sampling
    numpy: int  # numpy's and Python's global streams
    minibatches: int  # its minibatch order


def rank_seeds(seed: int, rank: int, world_size: int, restart: int = 0) -> RankSeeds:
    """Independent streams for every rank, from ``numpy.random.SeedSequence``: rank r of seed s never shares a
    stream with rank 0 of seed s + r (as ``seed + rank`` did), and a resume whose copies restart (``restart``:
    the update it resumes at) draws new ones instead of replaying the first run's."""
    child = np.random.SeedSequence([seed, restart]).spawn(world_size)[rank]
    return RankSeeds(*(int(x) for x in child.generate_state(4, dtype=np.uint32)))


def find_free_port() -> int:
    """A port the OS says is free now, for MASTER_PORT when --master-port is not given."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun_context() -> DistContext | None:
    """The group torchrun describes in RANK / WORLD_SIZE / LOCAL_RANK, or None outside torchrun."""
    import os

    if not all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return None
    return DistContext(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]))


def init_group(ctx: DistContext, device: torch.device, timeout_s: float) -> None:
    """Join the group: NCCL between GPUs, gloo between CPU workers; MASTER_ADDR/PORT come from the env."""
    import datetime

    if not ctx.enabled:
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=ctx.rank, world_size=ctx.world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))


def leave_group(barrier: bool) -> None:
    """Leave the group; after a clean finish, together (a barrier first), so no rank tears down early."""
    if dist.is_available() and dist.is_initialized():
        if barrier:
            dist.barrier()
        dist.destroy_process_group()
