"""Does a tuned config beat the default? Both trained on fresh seeds at one budget, compared on validation and test.

    python scripts/studies/tune_vs_default.py --tuned checkpoints/tune/<study>/best.yaml [--default default]
        [--seeds K] [--first-seed S] [--data NAME_OR_FILE] [--steps N] [--threads N] [--arms default tuned]
        [--set KEY=VALUE ...] [--out DIR] [--json]

A study's best trial is the maximum of many noisy scores, so its own value flatters it (the winner's curse). Here
both arms train again on seeds --first-seed .. --first-seed+K-1, which no trial of a study ran (a study's trials
use seeds 0..--seeds-1), at the same budget (--steps; default the tuned config's train.total_steps, which is the
study's --steps). Each run's score is what the study scored: the trainer's own best validation composite. Each
run's best_composite.pt is then walked on the test split (evaluate's continuous walk), which no trial ever read.

Reported: per arm, mean +- std (ddof 1) over seeds; tuned - default seed by seed with a percentile bootstrap 95%
CI; the study's own best value beside the fresh seeds' when summary.json sits next to --tuned. The verdict
follows docs/TUNING.md's goal: the tuned validation composite beats the default's by more than the seed spread (the
larger of the two arms' standard deviations); the test numbers are reported beside it, not judged. Run folders
--out/<data>/<arm>-seed<k> are reused when finished and resumed when not: the script can be stopped and run
again, or run as two processes (--arms default / --arms tuned) on one --out followed by one that collects.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import torch

from clstm_lab.studies.seeded_runs import arm_rows, paired_differences, run_record, train_to_budget
from clstm_ppo.config import ConfigError, load_config
from clstm_ppo.tables import format_records, strict_json

ARMS = ("default", "tuned")
METRICS = {"val_composite": "validation composite", "test_sharpe": "test Sharpe",
           "test_total_return": "test total return"}
CRITERION = "mean(tuned) - mean(default) of the validation composite > max(std(default), std(tuned)), ddof 1"


def one_run(args: argparse.Namespace, arm: str, seed: int) -> dict[str, Any]:
    """Train (or reuse, or resume) one arm's run for ``seed``; its numbers."""
    folder = args.out / Path(args.data).name.split(".")[0]
    name = f"{arm}-seed{seed}"
    sets = [*args.overrides, *([f"launch.threads_per_worker={args.threads}"] if args.threads else [])]
    train_to_budget(args.default if arm == "default" else str(args.tuned), args.data, seed, args.steps, folder, name,
                    sets)
    return {"arm": arm, "seed": seed, **run_record(folder / name)}


def study_summary(tuned: Path) -> dict[str, Any] | None:
    """The study's own report next to best.yaml (clstm-ppo-tune writes both), if there."""
    path = tuned.parent / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else None


def verdict(rows: list[dict], paired: dict[str, Any]) -> str:
    default, tuned = rows
    diff = tuned["val_composite"] - default["val_composite"]
    spread = max(default["val_composite_std"], tuned["val_composite_std"])
    if math.isnan(spread):  # one seed in an arm: no spread
        return "too few seeds to judge (at least 2 per arm)"
    lo, hi = paired["val_composite"]["ci95"]
    test = paired["test_sharpe"]
    said = (f"validation composite {tuned['val_composite']:.4f} vs {default['val_composite']:.4f} (difference "
            f"{diff:+.4f}, seed spread {spread:.4f}, paired 95% CI [{lo:+.4f}, {hi:+.4f}]); test Sharpe "
            f"{test['tuned_mean']:.3f} vs {test['default_mean']:.3f} (paired 95% CI [{test['ci95'][0]:+.3f}, "
            f"{test['ci95'][1]:+.3f}])")
    return ("tuned beats the default by more than the seed spread: " if diff > spread else
            "not shown: the tuned config does not beat the default by more than the seed spread: ") + said


def show(rows: list[dict], records: list[dict], study: dict[str, Any] | None) -> str:
    summary = [{"arm": r["arm"], "seeds": r["seeds"],
                **{label: (f"{100 * r[k]:.2f}% +- {100 * r[k + '_std']:.2f}%" if k == "test_total_return" else
                           f"{r[k]:.4f} +- {r[k + '_std']:.4f}") for k, label in METRICS.items()}} for r in rows]
    seeds = [{"arm": r["arm"], "seed": r["seed"], "val composite": f"{r['val_composite']:.4f}",
              "best at update": r["best_update"], "test Sharpe": f"{r['test_sharpe']:.4f}",
              "test return": f"{100 * r['test_total_return']:.2f}%", "train min": f"{r['train_min']:.1f}"}
             for r in records]
    parts = [format_records(summary), format_records(seeds)]
    if study and study.get("best"):
        best = study["best"]
        parts.append(f"the study's own best trial (trial {best['trial']}, seeds 0..{len(best['seed_values']) - 1}, the "
                     f"best of {study['trials']} trials): validation composite {best['value']:.4f}")
    return "\n\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tuned", type=Path, required=True, help="the tuned config: a study's best.yaml")
    parser.add_argument("--default", default="default", help="the config it is compared with (default: default)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per arm (default 5; at least 2 to judge)")
    parser.add_argument("--first-seed", type=int, default=100, help="the first seed (default 100: no trial's)")
    parser.add_argument("--data", default="sp500", help="a built-in name (sp500, dow, synthetic) or a file")
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (default: the tuned config's)")
    parser.add_argument("--threads", type=int, default=1, help="launch.threads_per_worker (default 1); 0: trainer's")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS, help="arms this process trains")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for both arms, e.g. --set train.eval_every=5 (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("checkpoints/tune_vs_default"), help="run folders")
    parser.add_argument("--json", action="store_true", help="print every number as one JSON object last")
    args = parser.parse_args()
    if args.seeds < 1 or (args.steps is not None and args.steps < 1) or args.threads < 0 or args.first_seed < 0:
        raise SystemExit("error: --seeds and --steps must be at least 1, --threads and --first-seed at least 0")
    if not args.tuned.is_file():
        raise SystemExit(f"error: --tuned {args.tuned} not found; python -m clstm_ppo.tune --data {args.data} "
                         "--trials N writes best.yaml in its --out")
    try:
        tuned_budget = load_config(str(args.tuned), []).train.total_steps
        load_config(args.default, [])
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    args.tuned, args.steps = args.tuned.resolve(), args.steps or tuned_budget
    if args.threads:
        torch.set_num_threads(args.threads)  # the test walks run in this process
    records = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):  # seed-major: stopped, whole seeds remain
        for arm in args.arms:
            print(f"== {arm}, seed {seed}", flush=True)
            records.append(one_run(args, arm, seed))
    study = study_summary(args.tuned)
    if len(args.arms) < 2:
        print(format_records(records))
        print("verdict: one arm only: nothing compared")
        return
    rows = arm_rows(records, "arm", list(ARMS), list(METRICS))
    paired = paired_differences(records, "arm", "default", "tuned", list(METRICS))
    text = verdict(rows, paired)
    print(show(rows, records, study))
    print(f"criterion: {CRITERION}\nverdict: {text}")
    if args.json:
        print(strict_json({"data": args.data, "default": args.default, "tuned": str(args.tuned), "steps": args.steps,
                          "seeds": list(range(args.first_seed, args.first_seed + args.seeds)), "summary": rows,
                          "paired": paired, "study": study, "criterion": CRITERION, "verdict": text,
                          "per_seed": records,
                          "command": " ".join(["python", "scripts/studies/tune_vs_default.py", *sys.argv[1:]])}))


if __name__ == "__main__":
    main()
