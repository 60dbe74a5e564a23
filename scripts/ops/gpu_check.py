"""What only a GPU can show: every precision trains, a GPU checkpoint resumes on the CPU and evaluates, and the
env and trainer's speed on the GPU, eager, compiled and replayed as CUDA graphs.

    python scripts/ops/gpu_check.py [--json] [--parts ranks train env rollout checks scale update sb3] [--deadline 530]
        [--step-cap 300] [--rows-out rows.jsonl] [--seconds 2] [--skip-compile] [--plan]

Parts, run in the order given. By default what a GPU has still to show comes first: "ranks" (two ranks sharing the
one GPU, compiled and graphed: through `--num-gpus 2`, then scripts/bench/check_ranks_agree.py's weights compared
after every update, collectives counted, none inside a capture, and the run resumed on one CPU rank), "train"
(the trainer at default and paper sizes, the last row with the rule prior of --config contracts; launch.update_graphs
inside the trainer ran once beside the checks, faster at default sizes and slower at paper sizes: it wants timing
alone; docs/BENCHMARKS.md), "env" and "rollout" (the compiled and captured paths are unmeasured since the tick
grid), then what GPUs measured last (an H200's "checks" passed on 2026-11-27, its "scale", "update" and "sb3" the
same day: docs/BENCHMARKS.md): "checks" (every precision, the compiled trainer, a GPU run resumed on the CPU and
that resumed on the GPU again, evaluate, host syncs); "scale" (65,536 copies train one update, evaluate and
checkpoint, at the default and at paper sizes); "update" (the PPO update alone at 4,096 copies, default and paper
sizes in fp32 and default in bf16: eager, static, compiled, compiled with the optimizer step captured (the
trainer's), compiled with CUDA graphs, and that with the optimizer step captured too, each within half an Adam step
of the eager update's weights); "sb3" (sb3-contrib's RecurrentPPO on the same GPU at paper sizes with 256 copies,
beside ours compiled+graphed at the same sizes, alone on the GPU since its ratio is a timing);
"env" (kernels per env step eager and compiled at 4,096 copies, env steps/s eager at 4,096 and 32,768 copies,
compiled and graphed at 32,768); "train" (the trainer at 4,096 copies at default and paper sizes, eager,
compiled+graphed and that with launch.update_graphs, 3 timed updates each, with model FLOP utilisation, how its
rollout and optimizer step ran and the rollout's share of the time); "rollout" (policy + env per decision: eager,
compiled, and captured as one CUDA graph at 4,096 and 32,768 copies; the captured rollout must equal the compiled
one bit for bit).

Each step runs a public command in a subprocess (as a user would; the trainer's on the smoke config in a
temporary folder), and the table says pass or fail, env steps/s and the GPU's peak memory (from the run's NVML
records).

A lent GPU machine gives a session minutes, not hours: ``--deadline S`` is the wall-clock budget of the whole
check. A step starts only while at least 20 s are left (MIN_START_S in lab/clstm_lab/bench/gpu_steps.py), and is
stopped when the budget runs out (or after ``--step-cap S`` seconds, so that a hung compile cannot eat the whole
budget); steps that did not start are rows marked "not run", so the table says what is still to measure. ``--rows-out``
appends each row to a JSON-lines file the moment its step ends, so a call killed from outside still leaves every
row measured before it. ``--plan`` lists the steps' commands in order and runs nothing (on any machine).
Without CUDA (and without --plan) it says so and exits 0: nothing here can run on a CPU-only machine.
"""
from __future__ import annotations

import argparse
import json
import shlex
import tempfile
from pathlib import Path

import torch

from clstm_lab.bench.gpu_plan import PARTS, part_steps
from clstm_lab.bench.gpu_steps import Budget, run_steps
from clstm_ppo.tables import print_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS, help="which parts, in this order")
    parser.add_argument("--deadline", type=float, help="wall-clock seconds for the whole check (default: no limit)")
    parser.add_argument("--step-cap", type=float,
                        help="stop any one step after this many seconds (a hung compile must not eat the budget)")
    parser.add_argument("--rows-out", type=Path, help="append each row to this JSON-lines file as its step ends")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per bench_env/rollout row")
    parser.add_argument("--skip-compile", action="store_true", help="leave out the compiled trainer's smoke run")
    parser.add_argument("--plan", action="store_true", help="list the steps' commands in order, run nothing")
    args = parser.parse_args()
    for flag, seconds in (("--deadline", args.deadline), ("--step-cap", args.step_cap)):
        if seconds is not None and seconds <= 0:
            parser.error(f"{flag} must be a positive number of seconds, not {seconds:g}")
    parts = list(dict.fromkeys(args.parts))  # each part once, in the order given
    if args.plan:
        for part in parts:
            for step in part_steps(part, Path("<tmp>"), args.seconds, args.skip_compile):
                print(f"{part:8} {step.label:32} python {shlex.join(step.argv)}")
        return
    if not torch.cuda.is_available():
        print("no CUDA device is visible: nothing to check here (run this on a GPU machine)")
        if args.json:
            print(json.dumps({"cuda": False, "rows": []}))
        return
    budget = Budget(args.deadline, args.step_cap)
    with tempfile.TemporaryDirectory() as tmp:
        steps = [step for part in parts for step in part_steps(part, Path(tmp), args.seconds, args.skip_compile)]
        rows = list(run_steps(steps, budget, args.rows_out, Path(__file__).resolve().parents[2]))  # this checkout
    print_table(rows, args.json, {"cuda": True, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                  "all_passed": all(r["passed"] is True for r in rows),
                                  "not_run": sum(r["passed"] is None for r in rows)})


if __name__ == "__main__":
    main()
