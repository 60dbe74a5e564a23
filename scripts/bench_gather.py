"""Cost of rank 0 gathering every rank's env copies and random streams for its checkpoints.

    python scripts/bench_gather.py [--json] [--repeats 20] [--sizes 32 1024 4096]

Two CPU workers over gloo, one thread each, each with a real Trainer (default config) of N env
copies after one rollout; the table times `Trainer.gather_rank_states`, the one collective every
rank makes per update so that a multi-worker resume continues every rank's episodes exactly.
Compare it with the seconds per update in docs/BENCHMARKS.md's scaling table.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from clstm_ppo.config import Config
from clstm_ppo.distributed import DistContext, find_free_port
from clstm_ppo.tables import print_table
from clstm_ppo.training.runner import Trainer


def worker(rank: int, port: int, sizes: list[int], repeats: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    rows = []
    for num_envs in sizes:
        cfg = Config()
        cfg.train.num_envs = num_envs
        trainer = Trainer(cfg, Path(out) / "run", torch.device("cpu"), DistContext(rank, 2, rank))
        trainer.collect()  # mid-episode copies with open positions, as at a real update boundary
        dist.barrier()
        start = time.perf_counter()
        for _ in range(repeats):
            trainer.gather_rank_states()
        dist.barrier()
        per_gather = (time.perf_counter() - start) / repeats
        size = len(pickle_bytes(trainer.rank_state()))
        rows.append({"num_envs": num_envs, "ms_per_gather": round(per_gather * 1e3, 2),
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(find_free_port(), args.sizes, args.repeats, tmp), nprocs=2)
        rows = torch.load(Path(tmp) / "rows.pt")
    print_table(rows, args.json, {"workers": 2, "backend": "gloo", "threads_per_worker": 1})


if __name__ == "__main__":
    main()
