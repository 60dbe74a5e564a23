"""Does training on generated paths (data.augment) change the agent's Sharpe on the real test split?

    python scripts/studies/augment_study.py --generator scenarios/cgan.pt [--augment 0.3] [--seeds K] [--data NAME]
        [--steps N] [--config NAME] [--threads N] [--arms real augmented] [--set KEY=VALUE ...] [--out DIR] [--json]

For each seed, two runs that differ only in data.augment: 0 ("real") and --augment ("augmented", a pool of
generated underlyings from --generator drawn for that share of the training episodes). Each run's
best_composite.pt (selected on the REAL validation split, as always) is walked on the real test split by
evaluate --json. The answer is the paired difference of test Sharpe (augmented - real, same seed) over seeds:
its mean and a percentile bootstrap 95% CI (resampling seeds, 10,000 draws). A CI that covers 0 is a null
result: no change shown. Run folders --out/<data>/<arm>-seed<k> are reused when finished and resumed when not, so
the script can be stopped and run again, or run as two processes (--arms real / --arms augmented) on one --out
followed by one that collects.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from clstm_lab.studies.seeded_runs import paired_differences, seeded_arm_run
from clstm_ppo.config import load_config
from clstm_ppo.tables import format_records

ARMS = ("real", "augmented")


def one_run(args: argparse.Namespace, arm: str, seed: int) -> dict[str, Any]:
    """One arm's run to its budget (resumably); only the augmented arm sees the generated pool."""
    sets = [f"data.augment={args.augment if arm == 'augmented' else 0.0}", *args.overrides]
    if arm == "augmented":
        sets.append(f"data.augment_checkpoint={args.generator}")
    return seeded_arm_run(args.config, args.data, args.out, args.steps, args.threads, "arm", arm, seed, sets)


def verdict(result: dict[str, Any], share: float) -> str:
    s = result["test_sharpe"]
    lo, hi = s["ci95"]
    n = len(result["paired_seeds"])
    if n < 2:
        return "too few paired seeds to judge"
    if lo <= 0 <= hi:
        return (f"no change shown: {share:.0%} augmentation moved the real test Sharpe by {s['mean_diff']:+.3f} on "
                f"average over {n} paired seeds, 95% CI [{lo:+.3f}, {hi:+.3f}] covers 0")
    way = "raised" if s["mean_diff"] > 0 else "lowered"
    return (f"{share:.0%} augmentation {way} the real test Sharpe by {s['mean_diff']:+.3f} over {n} paired seeds, "
            f"95% CI [{lo:+.3f}, {hi:+.3f}]")


def main() -> None:
    default_steps = load_config("default", []).train.total_steps
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generator", type=Path, required=True, help="a scenario generator .pt fitted on --data")
    parser.add_argument("--augment", type=float, default=0.3, help="data.augment of the augmented arm (default 0.3)")
    parser.add_argument("--seeds", type=int, default=5, help="paired seeds 0..K-1 (default 5)")
    parser.add_argument("--data", default="sp500")
    parser.add_argument("--config", default="default")
    parser.add_argument("--steps", type=int, default=default_steps,
                        help=f"env steps per run (default {default_steps:,})")
    parser.add_argument("--threads", type=int, default=1, help="launch.threads_per_worker (default 1); 0: trainer's")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS, help="arms this process trains")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, default=Path("checkpoints/augment"))
    parser.add_argument("--json", action="store_true", help="print every number as one JSON object last")
    args = parser.parse_args()
    if args.seeds < 1 or args.steps < 1 or args.threads < 0 or not 0 < args.augment < 1:
        raise SystemExit("error: --seeds and --steps must be at least 1, --threads at least 0, --augment in (0, 1)")
    if not args.generator.is_file():
        raise SystemExit(f"error: --generator {args.generator} not found; python -m clstm_ppo.scenarios train "
                         f"--data {args.data} --model cgan writes one")
    args.generator = args.generator.resolve()
    if args.threads:
        torch.set_num_threads(args.threads)
    records = []
    for seed in range(args.seeds):
        for arm in args.arms:
            print(f"== {arm}, seed {seed}", flush=True)
            records.append(one_run(args, arm, seed))
    table = [{"arm": r["arm"], "seed": r["seed"], "val composite": f"{r['val_composite']:.4f}",
              "test Sharpe": f"{r['test_sharpe']:.4f}", "test return": f"{100 * r['test_total_return']:.2f}%"}
             for r in records]
    print(format_records(table))
    result = (paired_differences(records, "arm", "real", "augmented", ["test_sharpe", "test_total_return",
                                                                          "val_composite"])
              if len(args.arms) == 2 else {"paired_seeds": []})
    if result["paired_seeds"]:
        s = result["test_sharpe"]
        print(f"test Sharpe: real {s['real_mean']:.4f}, augmented {s['augmented_mean']:.4f}, paired difference "
              f"{s['mean_diff']:+.4f}, bootstrap 95% CI [{s['ci95'][0]:+.4f}, {s['ci95'][1]:+.4f}]")
    text = verdict(result, args.augment) if result["paired_seeds"] else "one arm only: nothing compared"
    print(f"verdict: {text}")
    if args.json:
        print(json.dumps({"data": args.data, "config": args.config, "steps": args.steps, "augment": args.augment,
                          "generator": str(args.generator), "seeds": args.seeds, "per_seed": records,
                          "comparison": result, "verdict": text,
                          "command": " ".join(["python", "scripts/studies/augment_study.py", *sys.argv[1:]])}))


if __name__ == "__main__":
    main()
