"""Stopping together: a Ctrl-C or SIGTERM asks for a stop at the next update boundary, and every
rank learns of any rank's stop request, failure or early stop at the same boundary, so no rank waits
for one that left."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from clstm_ppo.distributed import DistContext


class StopRequest:
    """Set by SIGINT/SIGTERM while ``installed``; read once per update."""

    def __init__(self, announce: bool):
        self.requested = False
        # only rank 0 says it, once: Ctrl-C reaches workers and launcher alike
        self.announce = announce
        self.next_update = 0

    # signal handler signature
    def _handle(self, signum: int, frame: object) -> None:  # noqa: ARG002
        if self.announce and not self.requested:
            print(
                f"\n{signal.Signals(signum).name}: stopping after update {self.next_update} is "
                "finished and saved to latest.pt (the checkpoints are never left half-written, so "
                "kill -9 is safe too)",
                file=sys.stderr,
                flush=True,
            )
        self.requested = True

    @contextmanager
    def installed(self) -> Iterator[StopRequest]:
        previous = {
            sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


@dataclass
class Agreed:
    """What every rank decided together at one update boundary."""

    stop_requested: bool
    failed: bool
    early_stop: bool


def agree(
    ctx: DistContext, device: torch.device, stop_requested: bool, failed: bool, early_stop: bool
) -> Agreed:
    """One collective: each flag is true on every rank when it is true on any."""
    flags = ctx.all_reduce_sum(
        torch.tensor([float(stop_requested), float(failed), float(early_stop)], device=device)
    ).tolist()
    return Agreed(flags[0] > 0, flags[1] > 0, flags[2] > 0)
