"""The PPO update alone, by how its minibatch loss runs, on one stored rollout.

    python scripts/bench/bench_update.py [--json] [--device cpu|cuda] [--num-envs 32 256] [--sizes default|paper]
        [--paths eager static compiled step_captured graphs captured] [--precision fp32|bf16|fp16] [--updates 2]

Paths: "eager" is ``ppo.DistinctBarsLoss``: LSTM 1 once per distinct bar of the minibatch, LSTM 2 in fused runs cut at
episode starts (the trainer's update without ``launch.compile_loop``). "static" is ``static_update.StaticMinibatchLoss``
op by op: fixed shapes, LSTM 2 as a loop with resets. "compiled" is the same compiled (the trainer's update with
``launch.compile_loop`` on). "step_captured" is "compiled" with the optimizer step (clip and Adam) replayed as one CUDA
graph (``agent/optimizer_step.py``): the trainer's update on CUDA under ``launch.cuda_graphs``, fp32 or bf16. "graphs"
compiles it in reduce-overhead mode, each compiled call replayed as a CUDA graph (CUDA only; the trainer does not use it
yet). "captured" is "graphs" with the optimizer step also captured. The
last three need CUDA; the two with a captured step fp32 or bf16. All paths update the untrained
default agent from the same weights on the same eager rollout of the embedded S&P 500's training split (128 steps
per copy, 4 epochs of 4 minibatches), with the trainer's Adam.
"first_update_s" is the first update, compiling included; its weights are compared with the eager path's:
"diff_per_step" is the largest weight difference over the largest weight change of the eager update (Adam moves a
weight ~lr per step, so a gradient of ~0 that rounds to another sign differs by up to one step). Then ``--updates``
timed updates: "ms_per_update" and "decisions_per_s" (decisions trained on, epochs counted, per second).
"optimizer_step" says how the optimizer step ran, "optimizer_step_asked" how the path asked it to: they differ where
CUDA refused a capture, and the row then times an eager step. On a GPU, "peak_gb" is the most memory the path's
updates allocated and "update_gb" what that adds to the stored rollout and model: the update's activations, which
grow with a minibatch's decisions (docs/TRAINING.md, "Memory at scale"); blank on the CPU. On any device, for the
op-by-op paths (eager, static), what autograd keeps for backward from one minibatch's forward, in two parts (from a
minibatch and half of one): "saved_kb_per_decision", times a minibatch's decisions (copies / ppo.num_minibatches
x 128 steps), is what grows with the copies; "saved_gb_fixed" does not (the weights, LSTM 1 over the split's bars).
"""
from __future__ import annotations

import argparse

import torch

from clstm_lab.bench.update_paths import CUDA_PATHS, PATHS, SIZES, STEP_CAPTURED, bench_update
from clstm_ppo.device import DEVICE_CHOICES, configure_backends, pick_device
from clstm_ppo.tables import print_table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--device", default="cpu", choices=DEVICE_CHOICES)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[32])
    parser.add_argument("--sizes", default="default", choices=SIZES)
    parser.add_argument("--paths", nargs="+", default=["eager", "static", "compiled"], choices=PATHS)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    parser.add_argument("--updates", type=int, default=2, help="timed updates per path (after the first)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    device = pick_device(args.device)
    configure_backends(device)
    if set(args.paths) & set(CUDA_PATHS) and device.type != "cuda":
        parser.error(f"the {', '.join(CUDA_PATHS)} paths replay CUDA graphs: they need --device cuda")
    if set(args.paths) & set(STEP_CAPTURED) and args.precision == "fp16":
        parser.error("a captured optimizer step does not unscale fp16 gradients: use --precision fp32 or bf16")
    rows, cfg = bench_update(device, args.num_envs, args.sizes, tuple(args.paths), args.precision, args.updates)
    print_table(rows, args.json, {"device": str(device), "sizes": args.sizes, "precision": args.precision,
                                  "num_steps": cfg.ppo.num_steps})


if __name__ == "__main__":
    main()
