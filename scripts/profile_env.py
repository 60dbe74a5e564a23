"""Where an env step's time goes: kernel launches per step and the operations called most (torch.profiler).

    python scripts/profile_env.py [--device cuda] [--num-envs 4096] [--steps 20] [--rows 25]

On a GPU the env is bound by kernel launches, not arithmetic: each elementwise op launches a kernel of
~1 us of GPU time for ~8 us of host time, so the launch count per step sets its speed until the step is
fused (docs/BENCHMARKS.md, "On one NVIDIA H100"). On a CPU the same table shows operator calls per step.
Valid actions are drawn on the env's device inside the profiled region, as the trainer's policy does.
"""
from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from clstm_ppo.config import DataConfig, EnvConfig, MarketConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.device import DEVICE_CHOICES, pick_device, wait_for
from clstm_ppo.env import BatchedOptionsEnv

LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=20, help="profiled env steps, after 50 unprofiled ones")
    parser.add_argument("--rows", type=int, default=25, help="operations listed, by number of calls")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = pick_device(args.device)
    env = BatchedOptionsEnv(build_market_data(DataConfig()), "train", MarketConfig(), EnvConfig(),
                            num_envs=args.num_envs, seed=0, device=device)
    obs, gen = env.reset(), torch.Generator(device=device).manual_seed(0)

    def step(obs):
        return env.step(torch.multinomial(obs.mask.float(), 1, generator=gen).squeeze(-1)).obs

    for _ in range(50):  # past the first episodes' resets and the allocator's warm-up
        obs = step(obs)
    wait_for(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(args.steps):
            obs = step(obs)
        wait_for(device)
    events = prof.key_averages()
    host_ms = sum(e.self_cpu_time_total for e in events) / args.steps / 1e3
    if device.type == "cuda":
        launches = sum(e.count for e in events if e.key in LAUNCHES)
        gpu_ms = sum(e.self_device_time_total for e in events) / args.steps / 1e3
        work = f"{launches / args.steps:.0f} kernel launches, {gpu_ms:.2f} ms of GPU time"
    else:
        work = f"{sum(e.count for e in events if e.key.startswith('aten::')) / args.steps:.0f} aten operator calls"
    print(f"{args.num_envs} copies on {device}, per env step (with the action draw): {work}, "
          f"{host_ms:.2f} ms of host time under the profiler")
    print(events.table(sort_by="count", row_limit=args.rows))


if __name__ == "__main__":
    main()
