"""Where an env step's time goes: kernels per step and the operations called most (torch.profiler).

    python scripts/bench/profile_env.py [--device cpu|cuda] [--compiled] [--num-envs 4096] [--steps 20] [--sites 30]
        [--json]

On a GPU the eager env is bound by kernel launches, not arithmetic: each elementwise op launches a kernel of
~1 us of GPU time for ~8 us of host time, so the launch count per step sets its speed until the step is fused
(docs/BENCHMARKS.md, "On one NVIDIA H100"). ``--compiled`` profiles the step as one compiled graph
(``launch.compile_loop: on``). Kernels per step: on CUDA the kernel launches; on a CPU the loops that run, which are the
top-level aten operators that compute (views and allocations aside) plus inductor's fused C++ kernels. The action
draw (a multinomial over the mask, on the env's device, as the trainer's policy samples) is profiled with the
step and counted apart.

``--sites K`` (eager only) also counts the same operators by the package function that called them (its innermost
frame in ``clstm_ppo``), over as many more steps, and lists the K that call most: where to look when the eager
step is to get fewer operators.
"""
from __future__ import annotations

import argparse

import torch

from clstm_lab.bench.env_profile import profile_env_step
from clstm_ppo.device import DEVICE_CHOICES, pick_device
from clstm_ppo.tables import print_table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    parser.add_argument("--compiled", action="store_true",
                        help="the step as one compiled graph (launch.compile_loop: on)")
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=20, help="profiled env steps, after 50 unprofiled ones")
    parser.add_argument("--rows", type=int, default=25, help="operations listed, by number of calls")
    parser.add_argument("--sites", type=int, default=0, help="also list the K package functions calling most (eager)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.sites and args.compiled:
        parser.error("--sites counts eager operators by caller; a compiled step has no callers to count: drop one")
    torch.set_num_threads(1)
    row, extra, events = profile_env_step(pick_device(args.device), args.compiled, args.num_envs, args.steps,
                                          args.sites)
    if not args.json:
        print(events.table(sort_by="count", row_limit=args.rows))
        for site, n in extra.get("sites", {}).items():
            print(f"{n:8.1f}  {site}")
    print_table([row], args.json, extra)


if __name__ == "__main__":
    main()
