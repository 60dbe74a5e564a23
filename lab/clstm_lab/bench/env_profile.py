"""Where an env step's time goes: kernels per step and, eager, the package functions that call its operators
(torch.profiler; scripts/bench/profile_env.py prints it, docs/BENCHMARKS.md has the figures)."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

import clstm_ppo
from clstm_ppo.config import DataConfig, EnvConfig, MarketConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.device import wait_for
from clstm_ppo.env import BatchedOptionsEnv

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
    """``folder/file.py:function`` of the innermost frame in the package, this profiler's own aside (its driving loop
    is not a site of the step); "(outside the package)" if none."""
    frame = sys._getframe(2)
    while frame is not None and (not frame.f_code.co_filename.startswith(PACKAGE)
                                 or frame.f_code.co_filename == __file__):
        frame = frame.f_back
    if frame is None:
        return "(outside the package)"
    return f"{frame.f_code.co_filename.removeprefix(PACKAGE)}:{frame.f_code.co_name}"


def profile_env_step(device: torch.device, compiled: bool = False, num_envs: int = 4096, steps: int = 20,
                     sites: int = 0) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The default env on the embedded S&P 500 stepped 50 times unprofiled, then ``steps`` times under the profiler:
    its row (kernels, draw operators and host and GPU ms per step), what the table says beside it (with ``sites``,
    the ``sites`` package functions that call most operators, eager only) and the profiler's averages by operator."""
    if sites and compiled:
        raise ValueError("--sites counts eager operators by caller; a compiled step has no callers to count: drop one")
    if compiled and device.type == "cpu":
        import torch._inductor.config as inductor_config
        inductor_config.cpp.enable_kernel_profile = True  # name each fused C++ kernel in the profile
    env = BatchedOptionsEnv(build_market_data(DataConfig()), "train", MarketConfig(), EnvConfig(),
                            num_envs=num_envs, seed=0, device=device, records=False,
                            compile="on" if compiled else "off")
    obs, gen = env.reset(), torch.Generator(device=device).manual_seed(0)

    def step(obs):
        return env.step(torch.multinomial(obs.mask.float(), 1, generator=gen).squeeze(-1)).obs

    for _ in range(50):  # past compilation, the first episodes' restarts and the allocator's warm-up
        obs = step(obs)
    wait_for(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            obs = step(obs)
        wait_for(device)
    events = prof.key_averages()
    host_ms = sum(e.self_cpu_time_total for e in events) / steps / 1e3
    draws = sum(e.count for e in events if e.key.removeprefix("aten::") in DRAW) / steps
    if device.type == "cuda":
        launches = sum(e.count for e in events if e.key in LAUNCHES) / steps
        kernels = launches - draws  # a multinomial launches a few kernels of its own; an estimate of them
        gpu_ms = sum(e.self_device_time_total for e in events) / steps / 1e3
    else:
        found = cpu_kernels(prof)
        kernels = sum(n for name, n in found.items() if name.removeprefix("aten::") not in DRAW) / steps
        gpu_ms = 0.0
    row = {"device": str(device), "compiled": compiled, "num_envs": num_envs,
           "kernels_per_step": round(kernels, 1), "draw_ops_per_step": round(draws, 1),
           "host_ms_per_step": round(host_ms, 3), "gpu_ms_per_step": round(gpu_ms, 3)}
    extra = {"threads": torch.get_num_threads(), "dtype": env.cfg.dtype, "note": "host time is under the profiler"}
    if sites:
        with SiteCounter() as counter:
            for _ in range(steps):
                obs = step(obs)
        extra["sites"] = {site: round(n / steps, 1) for site, n in counter.found.most_common(sites)}
    return row, extra, events
