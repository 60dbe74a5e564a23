"""Host syncs the trainer makes on a GPU, counted by CUDA itself: per env step of the rollout, per minibatch
of the update, and per update in all.

    python scripts/bench/count_syncs.py [--json] [--num-envs 256] [--config default] [--precision fp32]

PyTorch's sync debug mode raises a warning at every operation that makes the host wait for the device
(``.item()``, ``nonzero``, ``torch.unique``, a copy to host memory, ...); this script records them while the
trainer collects one rollout and runs one update, after a warm-up update. The counts are what
docs/BENCHMARKS.md's "Host syncs" section derives from the code. Without CUDA it says so and exits 0.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from clstm_ppo.config import CHOICES, WITHOUT_RULE_PRIOR, load_config
from clstm_ppo.device import configure_backends, pick_device, wait_for
from clstm_ppo.tables import print_table
from clstm_ppo.training.runner import Trainer


def counted(work: Callable[[], Any]) -> tuple[Any, Counter]:
    """``work()``'s result and the source lines of the host syncs it made (one count per sync)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            result = work()
            wait_for(torch.device("cuda"))  # not counted: set_sync_debug_mode ignores explicit synchronize
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = Counter(f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchroniz" in str(w.message))
    return result, syncs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    parser.add_argument("--config", default="default", help="a named config or a YAML file")
    parser.add_argument("--num-envs", type=int, default=256, help="env copies")
    parser.add_argument("--precision", default="fp32", choices=CHOICES["launch.precision"])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device is visible: host syncs can only be counted on a GPU")
        if args.json:
            print(json.dumps({"cuda": False, "rows": []}))
        return
    device = pick_device("cuda")
    configure_backends(device)
    cfg = load_config(args.config, list(WITHOUT_RULE_PRIOR))  # PPO's own syncs, as earlier rows counted them
    cfg.train.num_envs, cfg.launch.precision, cfg.launch.device = args.num_envs, args.precision, "cuda"
    p = cfg.ppo
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp), device)
        trainer.train_step()  # warm-up: cuDNN's autotuning and first allocations are not the steady state
        _, rollout = counted(trainer.collect)
        _, update = counted(trainer.optimise)
        _, step = counted(trainer.train_step)
    minibatches = p.update_epochs * p.num_minibatches
    rows = [
        {"where": "rollout, per env step", "syncs": round(sum(rollout.values()) / p.num_steps, 2),
         "total": sum(rollout.values()), "sites": ", ".join(f"{k} x{v}" for k, v in rollout.most_common(6))},
        {"where": "update, per minibatch", "syncs": round(sum(update.values()) / minibatches, 2),
         "total": sum(update.values()), "sites": ", ".join(f"{k} x{v}" for k, v in update.most_common(6))},
        {"where": "one whole train_step", "syncs": sum(step.values()), "total": sum(step.values()),
         "sites": f"{p.num_steps} env steps + {minibatches} minibatches + per-update checks"},
    ]
    print_table(rows, args.json, {"cuda": True, "device": torch.cuda.get_device_name(0), "num_envs": args.num_envs,
                                  "precision": args.precision, "config": args.config})


if __name__ == "__main__":
    main()
