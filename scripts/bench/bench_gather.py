"""Cost of rank 0 gathering every rank's env copies and random streams for its checkpoints.

    python scripts/bench/bench_gather.py [--json] [--repeats 20] [--sizes 32 1024 4096] [--config default|paper]
        [--transports tensors pickled]

Two CPU workers over gloo, one thread each, each with a real Trainer (``--config``) of N env copies after one
rollout (of 8 steps: a rank's state has the same size after any number); the table times
`Trainer.gather_rank_states`, the one collective every rank makes per update so that a multi-worker resume
continues every rank's episodes exactly. Compare it with the seconds per update in docs/BENCHMARKS.md's scaling
table. "tensors" is the trainer's gather (the state's tensors as one byte buffer through a tensor gather);
"pickled" is how it gathered before 2026-11-27 (the whole state through ``gather_object``), timed alternately
with it for comparison.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from clstm_ppo.config import WITHOUT_RULE_PRIOR, load_config
from clstm_ppo.distributed import DistContext, find_free_port
from clstm_ppo.tables import print_table
from clstm_ppo.training.runner import Trainer


class PickledContext(DistContext):
    """The gather as the trainer made it before 2026-11-27: every rank's whole object pickled by gather_object."""

    def gather_to_main(self, obj: Any, device: torch.device = torch.device("cpu")) -> list[Any]:  # noqa: ARG002
        gathered: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, gathered, dst=0)
        return gathered or []


def worker(rank: int, port: int, sizes: list[int], repeats: int, config: str, transports: list[str],
           out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    rows = []
    contexts = {"tensors": DistContext(rank, 2, rank), "pickled": PickledContext(rank, 2, rank)}
    for num_envs in sizes:
        cfg = load_config(config, [f"train.num_envs={num_envs}", "ppo.num_steps=8", *WITHOUT_RULE_PRIOR])
        trainer = Trainer(cfg, Path(out) / "run", torch.device("cpu"), contexts["tensors"])
        trainer.collect()  # mid-episode copies with open positions, as at a real update boundary
        seconds: dict[str, list[float]] = {name: [] for name in transports}
        for _ in range(repeats):  # the transports alternate, so the machine's drift falls on both
            for name in transports:
                trainer.ctx = contexts[name]
                dist.barrier()
                start = time.perf_counter()
                trainer.gather_rank_states()
                dist.barrier()
                seconds[name].append(time.perf_counter() - start)
        size = len(pickle_bytes(trainer.rank_state().to_file()))
        for name in transports:
            rows.append({"config": config, "num_envs": num_envs, "transport": name,
                         "ms_per_gather": round(statistics.median(seconds[name]) * 1e3, 2),
                         "kb_per_rank": round(size / 1024, 1)})
    if rank == 0:
        torch.save(rows, Path(out) / "rows.pt")
    dist.destroy_process_group()


def pickle_bytes(obj: object) -> bytes:
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 1024, 4096])
    parser.add_argument("--config", default="default", help="a named config or YAML file (network sizes)")
    parser.add_argument("--transports", nargs="+", default=["tensors", "pickled"], choices=("tensors", "pickled"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(find_free_port(), args.sizes, args.repeats, args.config, args.transports, tmp),
                 nprocs=2)
        rows = torch.load(Path(tmp) / "rows.pt", weights_only=True)  # rows of numbers: read as data
    print_table(rows, args.json, {"workers": 2, "backend": "gloo", "threads_per_worker": 1})


if __name__ == "__main__":
    main()
