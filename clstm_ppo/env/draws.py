"""The env's random numbers: a counter-based hash of (copy's key, draw count, stream),
in integer tensor ops.

A ``torch.Generator`` cannot be passed into a compiled graph, a CUDA graph capture may use only the
device's default generator, and inductor's own random ops differ from eager's. A hash of counters
has none of these limits: the same bits in eager and compiled code, on CPU and CUDA; no host sync;
and its whole state is two (N,) integer tensors in the env state, so a checkpoint resumes it
exactly. Each copy's k-th episode start depends on its key and k alone, never on which other copies
ended on the same step.

The mixer is a 32-bit xor-shift-multiply hash (the "lowbias32" family) kept within int64
without overflow: values stay below 2**32 and every multiplier below 2**31, so each product is
below 2**63 and is masked back to 32 bits (signed overflow would be undefined behaviour in the
C++ inductor emits).
"""

from __future__ import annotations

import torch
from torch import Tensor

MASK32 = 0xFFFFFFFF
# Odd multipliers below 2**31 (see above); the first is lowbias32's.
MULTIPLIERS = (0x7FEB352D, 0x2C1B3C6D, 0x297A2D39)
# one independent draw per use at each episode start
STREAMS = {"symbol": 1, "start": 2, "stagger": 3}


def mix32(x: Tensor) -> Tensor:
    """A bijective scrambling of int64 values in [0, 2**32)."""
    for multiplier in MULTIPLIERS:
        x = x ^ (x >> 16)
        x = (x * multiplier) & MASK32
    return x ^ (x >> 15)


def copy_keys(seed: int, num_envs: int, device: torch.device | str) -> Tensor:
    """(N,) int64 keys, one stream per copy, fixed by the seed."""
    seed_key = mix32(
        torch.tensor(seed & MASK32, dtype=torch.long, device=device) ^ ((seed >> 32) & MASK32)
    )
    return mix32(seed_key ^ torch.arange(num_envs, device=device))


def start_hash(key: Tensor, count: Tensor) -> Tensor:
    """(N,) the hash each stream of a copy's ``count``-th draw derives from: computed once
    for several streams."""
    return mix32(key ^ (count & MASK32))


def uniform_of(base: Tensor, stream: str) -> Tensor:
    """(N,) float64 uniforms in [0, 1) of ``stream`` from the copies' ``start_hash``."""
    return mix32(base ^ STREAMS[stream]).to(torch.float64) * (1.0 / 2**32)


def integers_of(base: Tensor, stream: str, low: int | Tensor, high: int | Tensor) -> Tensor:
    """(N,) int64 uniform on [low, high] (inclusive) of ``stream`` from the copies' ``start_hash``:
    the bias of a 32-bit draw is below 1e-6 for a range of a few thousand bars."""
    return low + (uniform_of(base, stream) * (high - low + 1)).long()


def uniform(key: Tensor, count: Tensor, stream: str) -> Tensor:
    """(N,) float64 uniforms in [0, 1), one per copy: its ``count``-th draw of ``stream``."""
    return uniform_of(start_hash(key, count), stream)


def integers(
    key: Tensor, count: Tensor, stream: str, low: int | Tensor, high: int | Tensor
) -> Tensor:
    """(N,) int64 uniform on [low, high] (inclusive): each copy's ``count``-th
    draw of ``stream``."""
    return integers_of(start_hash(key, count), stream, low, high)
