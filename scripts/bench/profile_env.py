"""Where an env step's time goes: kernels per step and the operations called most (torch.profiler).

    python scripts/bench/profile_env.py [--device cpu|cuda] [--compiled] [--num-envs 4096] [--steps 20] [--sites 30]
        [--json]

On a GPU the eager env is bound by kernel launches, not arithmetic: each elementwise op launches a kernel of
~1 us of GPU time for ~8 us of host time, so the launch count per step sets its speed until the step is fused
(docs/BENCHMARKS.md, "On one NVIDIA H100"). ``--compiled`` profiles the step as one compiled graph
(``env.compile: on``). Kernels per step: on CUDA the kernel launches; on a CPU the loops that run, which are the
top-level aten operators that compute (views and allocations aside) plus inductor's fused C++ kernels. The action
draw (a multinomial over the mask, on the env's device, as the trainer's policy samples) is profiled with the
step and counted apart.

``--sites K`` (eager only) also counts the same operators by the package function that called them (its innermost
frame in ``clstm_ppo``), over as many more steps, and lists the K that call most: where to look when the eager
step is to get fewer operators.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

import clstm_ppo
from clstm_ppo.config import DataConfig, EnvConfig, MarketConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.device import DEVICE_CHOICES, pick_device, wait_for
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.tables import print_table

LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC")
# Operators that move no data through a loop: metadata, views and allocations.
NOT_KERNELS = ("view", "reshape", "as_strided", "expand", "expand_as", "unsqueeze", "squeeze", "select", "slice",
               "t", "transpose", "permute", "alias", "empty", "empty_like", "empty_strided", "detach", "lift_fresh",
               "_unsafe_view", "unbind", "split", "chunk", "flatten", "resolve_conj", "resolve_neg", "_reshape_alias",
               "view_as", "contiguous", "to", "_to_copy", "lift_fresh_copy")
# The action draw, counted apart from the step.
DRAW = ("multinomial",)
PACKAGE = str(Path(clstm_ppo.__file__).parent) + "/"  # where --sites looks for the calling function, installed or not


def cpu_kernels(prof: profile) -> Counter:
    """Loops run on a CPU, by name: top-level aten operators that compute, and inductor's kernels."""
    found = Counter()
    for event in prof.events():
        parent = event.cpu_parent
        if event.name.startswith("aten::") and (parent is None or not parent.name.startswith("aten::")):
            if event.name[len("aten::"):] not in NOT_KERNELS:
                found[event.name] += 1
        elif "cpp_fused" in event.name:  # inductor's C++ kernel (cpp.enable_kernel_profile)
            found["inductor:" + event.name.split("cpp_fused")[0] + "cpp_fused"] += 1
    return found


class SiteCounter(TorchDispatchMode):
    """Counts the operators that compute (``NOT_KERNELS`` and the draw aside) by the package function calling them."""

    def __init__(self) -> None:
        super().__init__()
        self.found = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name not in NOT_KERNELS and name not in DRAW:
            self.found[call_site()] += 1
        return func(*args, **(kwargs or {}))


def call_site() -> str:
    """``folder/file.py:function`` of the innermost frame in the package; "(outside the package)" if none."""
    frame = sys._getframe(2)
    while frame is not None and not frame.f_code.co_filename.startswith(PACKAGE):
        frame = frame.f_back
    if frame is None:
        return "(outside the package)"
    return f"{frame.f_code.co_filename.removeprefix(PACKAGE)}:{frame.f_code.co_name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    parser.add_argument("--compiled", action="store_true", help="the step as one compiled graph (env.compile: on)")
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=20, help="profiled env steps, after 50 unprofiled ones")
    parser.add_argument("--rows", type=int, default=25, help="operations listed, by number of calls")
    parser.add_argument("--sites", type=int, default=0, help="also list the K package functions calling most (eager)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.sites and args.compiled:
        parser.error("--sites counts eager operators by caller; a compiled step has no callers to count: drop one")
    torch.set_num_threads(1)
    device = pick_device(args.device)
    if args.compiled and device.type == "cpu":
        import torch._inductor.config as inductor_config
        inductor_config.cpp.enable_kernel_profile = True  # name each fused C++ kernel in the profile
    env = BatchedOptionsEnv(build_market_data(DataConfig()), "train", MarketConfig(), EnvConfig(),
                            num_envs=args.num_envs, seed=0, device=device, records=False,
                            compile="on" if args.compiled else "off")
    obs, gen = env.reset(), torch.Generator(device=device).manual_seed(0)

    def step(obs):
        return env.step(torch.multinomial(obs.mask.float(), 1, generator=gen).squeeze(-1)).obs

    for _ in range(50):  # past compilation, the first episodes' restarts and the allocator's warm-up
        obs = step(obs)
    wait_for(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(args.steps):
            obs = step(obs)
        wait_for(device)
    events = prof.key_averages()
    host_ms = sum(e.self_cpu_time_total for e in events) / args.steps / 1e3
    draws = sum(e.count for e in events if e.key.removeprefix("aten::") in DRAW) / args.steps
    if device.type == "cuda":
        launches = sum(e.count for e in events if e.key in LAUNCHES) / args.steps
        kernels = launches - draws  # a multinomial launches a few kernels of its own; an estimate of them
        gpu_ms = sum(e.self_device_time_total for e in events) / args.steps / 1e3
    else:
        found = cpu_kernels(prof)
        kernels = sum(n for name, n in found.items() if name.removeprefix("aten::") not in DRAW) / args.steps
        gpu_ms = 0.0
    row = {"device": str(device), "compiled": args.compiled, "num_envs": args.num_envs,
           "kernels_per_step": round(kernels, 1), "draw_ops_per_step": round(draws, 1),
           "host_ms_per_step": round(host_ms, 3), "gpu_ms_per_step": round(gpu_ms, 3)}
    extra = {"threads": torch.get_num_threads(), "dtype": env.cfg.dtype, "note": "host time is under the profiler"}
    if args.sites:
        with SiteCounter() as sites:
            for _ in range(args.steps):
                obs = step(obs)
        extra["sites"] = {site: round(n / args.steps, 1) for site, n in sites.found.most_common(args.sites)}
    if not args.json:
        print(events.table(sort_by="count", row_limit=args.rows))
        for site, n in extra.get("sites", {}).items():
            print(f"{n:8.1f}  {site}")
    print_table([row], args.json, extra)


if __name__ == "__main__":
    main()
