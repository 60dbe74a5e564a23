"""Samples per second with 1 and with 2 CPU workers (one thread each), in one run, and their ratio.

    python scripts/bench/bench_scaling.py [--json] [--updates 4] [--repeats 3] [--config default] [--ddp-variants]

The two cases alternate (1, 2, 1, 2, ...) so that each pair sees the same phase of a shared
machine; the table gives each case's median and the footer each pair's own ratio.

Each case runs the real command line (`python -m clstm_ppo.train --device cpu --num-workers N`)
with the same per-worker env copies, so N workers collect N x the samples per update. Rates
come from the run's metrics.jsonl: env steps between the first and the last update record,
over the time between them (start-up, data loading and the first update are left out).

With --ddp-variants it times 2 workers instead under DistributedDataParallel's settings (the
defaults, a larger gradient bucket, a static graph, gradients copied out of the buckets), alternating
the variants the same way.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from clstm_ppo.tables import print_table

ROOT = Path(__file__).resolve().parents[2]


# name -> the settings it changes from the defaults (clstm_ppo/config/sections.py, train.ddp_*)
DDP_VARIANTS = {"defaults": [], "bucket_100mb": ["launch.ddp_bucket_cap_mb=100"],
                "static_graph": ["launch.ddp_static_graph=true"],
                "no_bucket_view": ["launch.ddp_gradient_as_bucket_view=false"]}


def samples_per_second(workers: int, updates: int, config: str, sets: list[str] | None = None) -> tuple[float, float]:
    """(env steps/s, seconds per update) of a run with ``workers`` CPU workers and settings ``sets``."""
    with tempfile.TemporaryDirectory() as tmp:
        from clstm_ppo.config import WITHOUT_RULE_PRIOR, load_config

        cfg = load_config(config)
        batch = cfg.train.num_envs * cfg.ppo.num_steps * workers
        cmd = [sys.executable, "-m", "clstm_ppo.train", "--config", config, "--checkpoint-dir", tmp,
               "--device", "cpu", "--num-workers", str(workers), "--oversubscribe",
               "--total-steps", str(batch * (updates + 1)),
               "--set", "launch.threads_per_worker=1", "--set", "train.eval_every=100000",
               "--set", "output.checkpoint_every=100000",
               *[x for v in [*WITHOUT_RULE_PRIOR, *(sets or [])] for x in ("--set", v)]]
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
        metrics = next(Path(tmp).glob("*/metrics.jsonl")).read_text().splitlines()
        records = [r for r in map(json.loads, metrics) if r["kind"] == "update"]
    first, last = records[0], records[-1]
    elapsed = last["time"] - first["time"]
    return (last["step"] - first["step"]) / elapsed, elapsed / (len(records) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--updates", type=int, default=4, help="timed updates per case")
    parser.add_argument("--repeats", type=int, default=3, help="alternating (1 worker, 2 workers) pairs")
    parser.add_argument("--config", default="default")
    parser.add_argument("--ddp-variants", action="store_true", help="time DDP's settings with 2 workers instead")
    args = parser.parse_args()
    if args.ddp_variants:
        ddp_variants(args)
        return
    runs: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for workers in (1, 2):
            runs[workers].append(samples_per_second(workers, args.updates, args.config))
    rows = []
    for workers, results in runs.items():
        rate, per_update = statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)
        rows.append({"workers": workers, "samples_per_s": round(rate, 1), "s_per_update": round(per_update, 3)})
    pair_ratios = [round(two[0] / one[0], 3) for one, two in zip(runs[1], runs[2], strict=True)]
    speedup = round(rows[1]["samples_per_s"] / rows[0]["samples_per_s"], 3)
    print_table(rows, args.json, {"speedup_2_vs_1_of_medians": speedup,
                                  "pair_ratios": pair_ratios, "config": args.config, "threads_per_worker": 1})



def ddp_variants(args: argparse.Namespace) -> None:
    """2 workers under each DDP variant, the variants alternating, medians over the repeats."""
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in DDP_VARIANTS}
    for _ in range(args.repeats):
        for name, sets in DDP_VARIANTS.items():
            runs[name].append(samples_per_second(2, args.updates, args.config, sets))
    rows = [{"ddp": name, "settings": " ".join(DDP_VARIANTS[name]) or "-",
             "samples_per_s": round(statistics.median(r[0] for r in results), 1),
             "s_per_update": round(statistics.median(r[1] for r in results), 3),
             "each_run": " ".join(f"{r[0]:.0f}" for r in results)} for name, results in runs.items()]
    print_table(rows, args.json, {"workers": 2, "backend": "gloo", "config": args.config, "threads_per_worker": 1})


if __name__ == "__main__":
    main()
