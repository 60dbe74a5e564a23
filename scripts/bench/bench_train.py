"""Training throughput: our trainer against sb3-contrib's RecurrentPPO on the same env, side by side.

    python scripts/bench/bench_train.py [--json] [--updates 2] [--settings default paper paper-256] [--device cpu|cuda]
        [--compiled] [--cuda-graphs [--update-graphs]] [--precision fp32|bf16|fp16] [--num-envs N] [--skip-sb3]
        [--sb3-warmup-steps N] [--rule-prior]

Settings: "default" and "paper" network sizes with 32 env copies, and paper sizes with 256
copies ("paper-256"), where copies on one underlying share bars and the update's encoding of
each distinct bar once matters most. Both train the embedded S&P 500 training split with the same copies, 128 steps per
copy per update, 4 epochs, 4 minibatches and the same network sizes: sb3-contrib gets
our LSTM 1 + MLP as its features extractor (through the gymnasium wrapper, one env per
DummyVecEnv slot) and one shared LSTM of LSTM 2's size with linear heads. Both run on
one thread. "MFU" is our model FLOP/s (forward in the rollout, forward + backward in
the update, counted analytically; a rollout that caches per-bar codes counts one encoding
per bar, an update that encodes each distinct bar of a minibatch once counts those) over a
dense float32 matmul's FLOP/s measured here. "update_encodes" is LSTM 1 window encodings per
update, beside "update_decisions", the decisions it trains on (what per-window encoding ran).
"ratio_at_peak" is the ratio ours would reach if every one of its model FLOPs ran at
that matmul speed (100% MFU): the ceiling for any trainer doing the same computation.
``--compiled`` compiles the env step (``launch.compile_loop: on``), and with it each rollout decision, and the encoder
(``launch.compile_encoder``); ``--cuda-graphs`` also replays each decision as a CUDA graph (``launch.cuda_graphs: on``),
and ``--update-graphs`` the update's compiled loss too (``launch.update_graphs``). "update" says how that loss ran.
"rollout" says how the decisions ran (captured, compiled or eager: agent/fused_rollout.py), "optimizer_step" how the
update's clip and Adam step ran (captured or eager: agent/optimizer_step.py) beside "optimizer_step_asked", how the
trainer asked it to run (captured on CUDA with --cuda-graphs outside fp16): the two differ where CUDA refused the
capture and the step ran eagerly, ``--rule-prior`` keeps the rule prior of ``--config contracts`` (cloned before
the timed updates; without it, PPO alone as every older row), "rollout_share" the
share of the timed updates' seconds spent in rollouts. On a GPU sb3-contrib runs on the same GPU
(its policy there; its envs step on the host, as they always do).
"""
from __future__ import annotations

import argparse

import torch

from clstm_lab.bench.train_throughput import SETTINGS, throughput_rows
from clstm_ppo.device import DEVICE_CHOICES, configure_backends, pick_device
from clstm_ppo.tables import print_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--updates", type=int, default=2, help="timed updates per trainer (after one warm-up)")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS),
                        help="network sizes and env copies to time (default: all three)")
    parser.add_argument("--num-envs", type=int, help="env copies for every setting instead of its own (a GPU's 4,096)")
    parser.add_argument("--skip-sb3", action="store_true", help="time ours only")
    parser.add_argument("--sb3-warmup-steps", type=int, default=0,
                        help="warm sb3-contrib up with a throwaway model of this many steps a copy instead of one "
                             "whole update of its own (0, the default): on a GPU, minutes saved")
    parser.add_argument("--compiled", action="store_true", help="ours with the env step and the encoder compiled")
    parser.add_argument("--cuda-graphs", action="store_true", help="ours with each decision replayed as a CUDA graph")
    parser.add_argument("--update-graphs", action="store_true",
                        help="ours with the update's compiled loss replayed as CUDA graphs too (needs --cuda-graphs)")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                        help="ours' launch.precision (sb3-contrib always runs fp32)")
    parser.add_argument("--device", default="cpu", choices=DEVICE_CHOICES, help="where ours trains (default cpu)")
    parser.add_argument("--rule-prior", action="store_true",
                        help="ours with the rule prior of --config contracts (its clone before the timed updates)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = pick_device(args.device)
    configure_backends(device)  # as the trainer's workers do; sb3-contrib runs under it too
    if args.sb3_warmup_steps < 0:
        parser.error(f"--sb3-warmup-steps is {args.sb3_warmup_steps}: give 0 (one whole update) or more steps")
    if args.cuda_graphs and device.type != "cuda":
        parser.error("--cuda-graphs needs a CUDA device (--device cuda)")
    if args.update_graphs and not args.cuda_graphs:
        parser.error("--update-graphs replays the update beside the captured rollout: add --cuda-graphs")
    rows, peak = throughput_rows(args.settings, args.updates, device, num_envs=args.num_envs,
                                 precision=args.precision, compiled=args.compiled, cuda_graphs=args.cuda_graphs,
                                 update_graphs=args.update_graphs, skip_sb3=args.skip_sb3,
                                 sb3_warmup_steps=args.sb3_warmup_steps, rule_prior=args.rule_prior)
    print_table(rows, args.json, {"matmul_gflops_1_thread": round(peak / 1e9, 1), "updates_timed": args.updates})


if __name__ == "__main__":
    main()
