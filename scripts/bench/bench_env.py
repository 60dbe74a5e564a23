"""Env steps per second of the batched options env on CPU with one thread.

    python scripts/bench/bench_env.py [--json] [--seconds 3] [--compiled] [--cuda-graphs] [--device cpu|cuda]

Actions are drawn uniformly among the valid ones outside the timed region, so the
table measures the env alone: every step fills orders, ages, expires and marks
every position with its Greeks, and builds the portfolio state and action mask.
Two columns: the observation as the trainer reads it when it caches per-bar LSTM 1
codes (bar rows; the window is gathered only on access), and with the N x TW x F
market windows gathered every step (``obs.market``), as any window consumer needs.
The env steps as the trainer's does: no per-episode records on the host (episode figures are summed on the
device). ``--compiled`` runs the step as one compiled graph (``launch.compile_loop: on``); ``--cuda-graphs`` also
replays it as a CUDA graph (compile mode "reduce-overhead"; CUDA only). The footer's reference multiply
times one plain tensor op before and after the table, so a slow or fast moment of the machine's arithmetic
shows up next to the numbers.
"""
from __future__ import annotations

import argparse
import time

import torch

from clstm_ppo.config import Config
from clstm_ppo.device import DEVICE_CHOICES, configure_backends, pick_device, wait_for
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.market.observed import observed_market_data
from clstm_ppo.tables import print_table

OLDER_SYSTEM_STEPS_PER_S = 340  # the seed documents' figure for the older system


def measure(data, cfg: Config, num_envs: int, seconds: float, windows: bool,
            device: torch.device = torch.device("cpu"), compiled: str = "off") -> float:
    """Env steps per second; ``compiled``: the env's ``compile`` setting, or "graphs" for a CUDA-graphed one."""
    env = BatchedOptionsEnv(data, "train", cfg.market, cfg.env, num_envs, device=device, seed=0, records=False,
                            compile="on" if compiled != "off" else "off", cuda_graphs=compiled == "graphs")
    obs = env.reset()
    warm = 3 if compiled != "off" else 0  # compilation (and graph capture) happen on the first calls, untimed
    gen = torch.Generator().manual_seed(0)
    steps, elapsed = -warm, 0.0
    while elapsed < seconds:
        # Uniform over valid actions, drawn outside the timed region.
        action = torch.multinomial(obs.mask.float().cpu(), 1, generator=gen).squeeze(-1).to(device)
        wait_for(device)
        start = time.perf_counter()
        obs = env.step(action).obs
        if windows:
            obs.market  # noqa: B018 (gathers the windows)
        wait_for(device)  # a GPU's queued work counts where it ran
        elapsed += (time.perf_counter() - start) * (steps >= 0)
        steps += 1
    return steps * num_envs / elapsed


def reference_op_us(repeats: int = 3000) -> float:
    """Microseconds of one plain float multiply of two (5, 4096) tensors: a gauge of the machine's arithmetic
    speed at the moment. This machine's speed drifts by up to ~1.7x over hours; a slow phase that hits memory
    rather than arithmetic may not show here (docs/BENCHMARKS.md), so compare columns of one run first."""
    a, b = torch.rand(5, 4096), torch.rand(5, 4096)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats // 5):
            torch.mul(a, b)
        best = min(best, (time.perf_counter() - start) / (repeats // 5) * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per row")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 1024, 4096])
    parser.add_argument("--device", default="cpu", choices=DEVICE_CHOICES, help="where the env steps (default cpu)")
    parser.add_argument("--compiled", action="store_true",
                        help="the step as one compiled graph (launch.compile_loop: on)")
    parser.add_argument("--cuda-graphs", action="store_true", help="the compiled step replayed as a CUDA graph")
    parser.add_argument("--glibc-defaults", action="store_true",
                        help="leave glibc's malloc settings alone (the trainer keeps freed memory for reuse)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = pick_device(args.device)
    if args.cuda_graphs and device.type != "cuda":
        parser.error("--cuda-graphs needs a CUDA device (--device cuda)")
    compiled = "graphs" if args.cuda_graphs else "on" if args.compiled else "off"
    if not args.glibc_defaults:
        configure_backends(device)  # as the trainer's workers do
    cfg = Config()
    data = observed_market_data(cfg)  # what an agent of cfg observes
    reference_before = reference_op_us()
    rows = []
    for n in args.sizes:
        rate = measure(data, cfg, n, args.seconds, windows=False, device=device, compiled=compiled)
        with_windows = measure(data, cfg, n, args.seconds, windows=True, device=device, compiled=compiled)
        rows.append({"num_envs": n, "env_steps_per_s": round(rate), "with_windows": round(with_windows),
                     "vs_older_system": round(rate / OLDER_SYSTEM_STEPS_PER_S, 1)})
    print_table(rows, args.json, {"device": str(device), "step": compiled, "threads": torch.get_num_threads(),
                                  "dtype": cfg.env.dtype,
                                  "data": cfg.data.source,
                                  "malloc": "glibc defaults" if args.glibc_defaults else "freed memory kept",
                                  "reference_multiply_us":
                                      f"{reference_before:.2f} before, {reference_op_us():.2f} after"})


if __name__ == "__main__":
    main()
