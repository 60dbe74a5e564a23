"""What 2, 4 and 8 GPUs would give, from quantities measured on one GPU and the links' bandwidths.

    python scripts/studies/project_scaling.py [--config default] [--num-envs 4096] [--update-s 0.70] [--rollout-s 0.03]
        [--eval-s 0] [--checkpoint-s 0.02] [--state-mb 6.4] [--gpus 1 2 4 8] [--latency-us US] [--json]

Each GPU trains its own copies (weak scaling: the batch grows with the GPUs), so a step of n GPUs does n times one
GPU's env steps in one GPU's rollout and update time, plus what only several ranks pay: one all-reduce of the
gradients before each optimizer step (the static update's, ``DistContext.average_gradients``: ring all-reduce,
2 (n - 1) / n of the gradient bytes over the slowest link, plus a fixed latency a collective), three small
all-reduces an update (the advantages' moments, the episode sums, the stop agreement: latency alone), and the
state gather of every rank's copies to rank 0 with each checkpoint (its bytes over the same link). Not modelled:
ranks that wait for the slowest one (their updates' spread), which only a run on several GPUs can measure. Rank
0's validation walk and checkpoint write are paid once whatever n, so they are in the one-GPU time too.
Efficiency = n GPUs' env steps per second over n times one GPU's.

Measured inputs (docs/BENCHMARKS.md, docs/data/gpu_runs/): one H100, default sizes, 4,096 copies: 715k env steps/s
with the rollout 4% of each update (--update-s, --rollout-s); a checkpoint's gather and write at that size
(--checkpoint-s); the state a rank sends, 102 MB at 65,536 copies, so 6.4 MB at 4,096 (--state-mb). --eval-s:
rank 0's validation walk, paid every train.eval_every updates, unmeasured on a GPU (0 by default: paid by one GPU
too, it can only shrink the multi-rank costs' share).
Bandwidths (--link): NVLink 4, 900 GB/s per H100 both ways together, 450 GB/s each way (NVIDIA's H100 datasheet);
PCIe 5.0 x16, 128 GB/s both ways, 64 GB/s each way (PCI-SIG); both as peaks, so the projection is an upper bound.
"""
from __future__ import annotations

import argparse

from clstm_lab.studies.scaling import LATENCY_S, LINKS_GB_PER_S, gradient_bytes, project
from clstm_ppo.config import load_config
from clstm_ppo.tables import print_table, strict_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="default")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--num-envs", type=int, default=4096, help="copies a GPU (the measured run's: 4,096)")
    parser.add_argument("--update-s", type=float, default=0.70, help="one GPU's PPO update, seconds (measured)")
    parser.add_argument("--rollout-s", type=float, default=0.03, help="one GPU's rollout, seconds (measured)")
    parser.add_argument("--eval-s", type=float, default=0.0,
                        help="rank 0's validation walk, seconds, paid every train.eval_every updates (unmeasured "
                             "on a GPU)")
    parser.add_argument("--checkpoint-s", type=float, default=0.02, help="rank 0's checkpoint write a update")
    parser.add_argument("--state-mb", type=float, default=6.4,
                        help="one rank's env state and LSTM 2 state gathered with each checkpoint, MB")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--latency-us", type=float, default=None, help="replace each link's assumed latency")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cfg = load_config(args.config, args.overrides)
    params, grad_bytes = gradient_bytes(args.config, args.overrides)
    p = cfg.ppo
    optimizer_steps = p.update_epochs * p.num_minibatches // p.grad_accumulation
    rows = []
    for link, gb_per_s in LINKS_GB_PER_S.items():
        latency = LATENCY_S[link] if args.latency_us is None else args.latency_us * 1e-6
        for n in args.gpus:
            rows.append({"link": link, **project(n, args.update_s, args.rollout_s, args.num_envs * p.num_steps,
                                                 optimizer_steps, grad_bytes, args.eval_s / cfg.train.eval_every,
                                                 args.checkpoint_s, args.state_mb * 1e6, gb_per_s, latency)})
    print(f"{params:,} parameters: {grad_bytes / 1e6:.2f} MB a gradient all-reduce, {optimizer_steps} a update")
    print_table(rows, False)
    if args.json:
        print(strict_json({"parameters": params, "gradient_bytes": grad_bytes, "optimizer_steps": optimizer_steps,
                           "rows": rows}))


if __name__ == "__main__":
    main()
