"""Process-group context: rank, world size and the collectives the trainer uses.

With one worker every collective is the identity, so the trainer has a single
code path. Every rank calls every collective the same number of times, and each
call is counted, with whether a CUDA graph was being captured: a collective inside
a capture deadlocks (NCCL before 2.9.6, gloo always), so such a call is refused
in one line instead (docs/DISTRIBUTED.md).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.distributed as dist


class TrainingFailure(RuntimeError):
    """A stop every rank agreed on because training went wrong (e.g. a non-finite loss)."""


class StrayRankVariables(ValueError):
    """torchrun's RANK / WORLD_SIZE / LOCAL_RANK in the environment, but not as
    torchrun sets them."""


@dataclass
class CollectiveRecord:
    """How many times each collective ran, and how many of those inside a CUDA graph capture (always
    0: such a call raises first). The trainer logs and clears it at each update boundary."""

    calls: Counter = field(default_factory=Counter)
    in_capture: int = 0

    def note(self, name: str) -> None:
        capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
        if capturing:
            self.in_capture += 1
            raise RuntimeError(
                f"a collective ({name}) was called while a CUDA graph was being captured, where it "
                "would deadlock: keep collectives outside captured code (docs/DISTRIBUTED.md)"
            )
        self.calls[name] += 1

    def take(self) -> dict[str, int]:
        """The counts since the last take, and the captures' (``in_capture``), then cleared."""
        out = {**dict(sorted(self.calls.items())), "in_capture": self.in_capture}
        self.calls.clear()
        self.in_capture = 0
        return out


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    ranks_per_gpu: int = 1  # >1: a test mode, several ranks sharing one GPU over gloo
    record: CollectiveRecord = field(default_factory=CollectiveRecord, compare=False, repr=False)

    @property
    def gpu_index(self) -> int:
        """This rank's GPU among the machine's visible ones."""
        return self.local_rank // self.ranks_per_gpu

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return tensor
        self.record.note("all_reduce")
        out = tensor.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def all_reduce_mean(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.all_reduce_sum(tensor) / self.world_size if self.enabled else tensor

    def average_gradients(self, module: torch.nn.Module) -> None:
        """Every rank's gradients replaced by their mean over the ranks, in one all-reduce: what DDP
        does during the backward, for an update that does not run through DDP's forward
        (``agent/static_update.py``)."""
        if not self.enabled:
            return
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        mean = self.all_reduce_mean(torch.cat([g.reshape(-1) for g in grads]))
        torch._foreach_copy_(
            grads,
            [
                part.view_as(g)
                for part, g in zip(mean.split([g.numel() for g in grads]), grads, strict=True)
            ],
        )

    def gather_to_main(self, obj: Any, device: torch.device = torch.device("cpu")) -> list[Any]:
        """Every rank's ``obj`` (dicts, lists and tuples of CPU tensors and picklable values) in
        rank order on rank 0; an empty list elsewhere. The tensors travel as one byte buffer through
        a tensor gather, on ``device`` under NCCL (the rank's GPU), not pickled: at 65,536 copies a
        rank's state is hundreds of MB, which pickled objects move slowly over gloo
        (docs/BENCHMARKS.md). Only the rest, with each tensor's dtype and shape, is pickled."""
        if not self.enabled:
            return [obj]
        self.record.note("gather")
        tensors: list[torch.Tensor] = []
        skeleton = _take_tensors(obj, tensors)
        layout = [(t.dtype, tuple(t.shape)) for t in tensors]
        skeletons: list[Any] | None = [None] * self.world_size if self.is_main else None
        # Under NCCL the pickled bytes travel through this rank's current GPU.
        dist.gather_object((skeleton, layout), skeletons, dst=0)
        # gloo gathers host tensors only
        on = device if dist.get_backend() == "nccl" else torch.device("cpu")
        size = torch.tensor(
            [sum(_padded(t.numel() * t.element_size()) for t in tensors)], device=on
        )
        # a gather takes one size from every rank: pad to the largest
        dist.all_reduce(size, op=dist.ReduceOp.MAX)
        mine = _pack(tensors, torch.empty(int(size.item()), dtype=torch.uint8, device=on))
        buffers = [torch.empty_like(mine) for _ in range(self.world_size)] if self.is_main else None
        dist.gather(mine, buffers, dst=0)
        if skeletons is None or buffers is None:
            return []
        return [
            _put_tensors(skeleton, _unpack(buffer.cpu(), layout))
            for (skeleton, layout), buffer in zip(skeletons, buffers, strict=True)
        ]

    def broadcast_parameters(self, module: torch.nn.Module) -> None:
        """Give every rank rank 0's weights (after work each rank did alone, e.g. pretraining)."""
        if self.enabled:
            self.record.note("broadcast")
            for param in module.parameters():
                dist.broadcast(param.data, src=0)


# Each tensor's bytes start at a multiple of this in the gathered buffer, so that
# any dtype can view them in place.
_ALIGN = 16


@dataclass(frozen=True)
class _Slot:
    """Where a tensor was in a gathered object: its place in the buffer's order."""

    index: int


def _take_tensors(obj: Any, tensors: list[torch.Tensor]) -> Any:
    """``obj`` with each tensor replaced by a ``_Slot`` and appended to ``tensors``."""
    if isinstance(obj, torch.Tensor):
        tensors.append(obj.detach())
        return _Slot(len(tensors) - 1)
    if isinstance(obj, dict):
        return {k: _take_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        # a namedtuple is sent as it is
        return type(obj)(_take_tensors(v, tensors) for v in obj)
    return obj


def _put_tensors(skeleton: Any, tensors: list[torch.Tensor]) -> Any:
    """``_take_tensors`` undone: each ``_Slot`` replaced by its tensor."""
    if isinstance(skeleton, _Slot):
        return tensors[skeleton.index]
    if isinstance(skeleton, dict):
        return {k: _put_tensors(v, tensors) for k, v in skeleton.items()}
    if isinstance(skeleton, (list, tuple)) and not hasattr(skeleton, "_fields"):
        return type(skeleton)(_put_tensors(v, tensors) for v in skeleton)
    return skeleton


def _padded(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


def _pack(tensors: list[torch.Tensor], flat: torch.Tensor) -> torch.Tensor:
    """``flat`` (uint8, at least the padded size) holding the tensors' bytes one after another, each
    from a multiple of ``_ALIGN`` on; the padding's bytes are left as they were."""
    at = 0
    for t in tensors:
        raw = t.contiguous().reshape(-1).view(torch.uint8)
        flat[at : at + raw.numel()] = raw
        at += _padded(raw.numel())
    return flat


def _unpack(
    flat: torch.Tensor, layout: list[tuple[torch.dtype, tuple[int, ...]]]
) -> list[torch.Tensor]:
    """``_pack``'s tensors back from its bytes, by their dtypes and shapes in order: copies, since
    torch.save refuses views of one buffer as different dtypes (a checkpoint holds them)."""
    tensors, at = [], 0
    for dtype, shape in layout:
        nbytes = math.prod(shape) * dtype.itemsize
        tensors.append(flat[at : at + nbytes].view(dtype).reshape(shape).clone())
        at += _padded(nbytes)
    return tensors


class RankSeeds(NamedTuple):
    env: int  # the rank's env copies (episode starts, underlyings)
    torch: int  # its action sampling
    numpy: int  # numpy's and Python's global streams
    minibatches: int  # its minibatch order


def rank_seeds(seed: int, rank: int, world_size: int, restart: int = 0) -> RankSeeds:
    """Independent streams for every rank, from ``numpy.random.SeedSequence``: rank r of seed s
    never shares a stream with rank 0 of seed s + r (as ``seed + rank`` did), and a resume
    whose copies restart (``restart``: the update it resumes at) draws new ones instead of
    replaying the first run's."""
    child = np.random.SeedSequence([seed, restart]).spawn(world_size)[rank]
    return RankSeeds(*(int(x) for x in child.generate_state(4, dtype=np.uint32)))


def find_free_port() -> int:
    """A port the OS says is free now, for MASTER_PORT when --master-port is not given."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
# where the ranks meet: torchrun sets them with the rest
RENDEZVOUS_VARIABLES = ("MASTER_ADDR", "MASTER_PORT")


def torchrun_context() -> DistContext | None:
    """The group torchrun describes in RANK / WORLD_SIZE / LOCAL_RANK, or None outside torchrun. A
    partial or inconsistent set (left over in a shell, or from another launcher) is a
    ``StrayRankVariables`` line, not a rendezvous that waits for ranks that never come."""
    import os

    present = [k for k in TORCHRUN_VARIABLES if k in os.environ]
    if not present:
        return None
    fix = f"unset {' '.join(present)} to train without torchrun, or launch with torchrun"
    if len(present) < len(TORCHRUN_VARIABLES):
        missing = [k for k in TORCHRUN_VARIABLES if k not in os.environ]
        raise StrayRankVariables(
            f"{', '.join(present)} set without {', '.join(missing)}: a partial torchrun "
            f"environment; {fix}"
        )
    try:
        rank, world, local = (int(os.environ[k]) for k in TORCHRUN_VARIABLES)
    except ValueError:
        shown = ", ".join(f"{k}={os.environ[k]!r}" for k in TORCHRUN_VARIABLES)
        raise StrayRankVariables(f"{shown}: these must be whole numbers; {fix}") from None
    if world < 1 or not 0 <= rank < world or local < 0:
        raise StrayRankVariables(
            f"RANK={rank} WORLD_SIZE={world} LOCAL_RANK={local} do not describe a group "
            f"(0 <= RANK < WORLD_SIZE, LOCAL_RANK >= 0); {fix}"
        )
    unset = [k for k in RENDEZVOUS_VARIABLES if k not in os.environ]
    if world > 1 and unset:
        raise StrayRankVariables(
            f"RANK, WORLD_SIZE={world} and LOCAL_RANK are set but {' and '.join(unset)} "
            f"{'is' if len(unset) == 1 else 'are'} not, so no rank could find the others; {fix}"
        )
    return DistContext(rank, world, local)


def init_group(ctx: DistContext, device: torch.device, timeout_s: float) -> None:
    """Join the group: NCCL between GPUs, gloo between CPU workers and between ranks that share a
    GPU (NCCL refuses two ranks on one device); MASTER_ADDR/PORT come from the env."""
    import datetime

    if not ctx.enabled:
        return
    backend = "nccl" if device.type == "cuda" and ctx.ranks_per_gpu == 1 else "gloo"
    dist.init_process_group(
        backend,
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def leave_group(barrier: bool) -> None:
    """Leave the group; after a clean finish, together (a barrier first), so no rank
    tears down early."""
    if dist.is_available() and dist.is_initialized():
        if barrier:
            dist.barrier()
        dist.destroy_process_group()
