"""Does bf16 mixed precision learn what fp32 learns? Seeds of each precision at one budget, compared.

    python scripts/studies/precision_equivalence.py [--seeds K] [--precisions fp32 bf16] [--data NAME_OR_FILE]
        [--steps N] [--config NAME] [--threads N] [--set KEY=VALUE ...] [--out DIR] [--json]

For each precision (launch.precision) and seed, trains one run (the config's settings otherwise), takes the
trainer's own best validation composite (the maximum over the run's validation walks, kept in the run's
checkpoints), and backtests that run's best_composite.pt on the test split with evaluate's continuous walk
(the walk itself is float32 whatever the training precision). Reports mean +- std (ddof 1) over seeds of the
validation composite, the test Sharpe and the test total return, each seed's numbers, and for every precision
after the first, the difference of means against the first and whether |difference| <= the larger of the
two standard deviations ("within one standard deviation", docs/TRAINING.md "Precision"). Each run
has its own folder under --out/<data>/<precision>-seed<k>: a finished run is reused and an unfinished one resumed
from latest.pt, so the script can be stopped and run again, or run as several processes (e.g. one per precision)
on one --out.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from clstm_lab.studies.seeded_runs import arm_rows, seeded_arm_run
from clstm_ppo.config import load_config
from clstm_ppo.tables import format_records

# What is compared, with the key each seed's record holds it under.
METRICS = {"val_composite": "validation composite", "test_sharpe": "test Sharpe",
           "test_total_return": "test total return"}
CRITERION = "|mean(other) - mean(first)| <= max(std(first), std(other)), std with ddof 1, over seeds"


def one_run(args: argparse.Namespace, precision: str, seed: int) -> dict[str, Any]:
    """One run at ``precision`` to its budget: fresh, or continued from latest.pt where an earlier launch stopped."""
    return seeded_arm_run(args.config, args.data, args.out, args.steps, args.threads, "precision", precision, seed,
                          [f"launch.precision={precision}", *args.overrides])


def summarise(records: list[dict[str, Any]], precisions: list[str]) -> tuple[list[dict], list[dict]]:
    """One row per precision (mean, std, per-seed values) and one comparison per metric and other precision."""
    rows = arm_rows(records, "precision", precisions, list(METRICS))
    ref, comparisons = rows[0], []
    for other in rows[1:]:
        for key, label in METRICS.items():
            diff = other[key] - ref[key]
            bound = max(ref[f"{key}_std"], other[f"{key}_std"])
            comparisons.append({"metric": label, "key": key, "precisions": f"{other['precision']} - "
                                f"{ref['precision']}", "diff": diff, "larger_std": bound,
                                "within_one_std": bool(abs(diff) <= bound)})  # NaN std (one seed): False
    return rows, comparisons


def show(rows: list[dict], comparisons: list[dict], records: list[dict]) -> str:
    pct = {"test_total_return"}  # returns read as percentages

    def cell(key: str, mean: float, std: float) -> str:
        k = 100 if key in pct else 1
        return f"{k * mean:.3f} +- {k * std:.3f}" + ("%" if key in pct else "")

    summary = [{"precision": r["precision"], "seeds": r["seeds"],
                **{label: cell(key, r[key], r[f"{key}_std"]) for key, label in METRICS.items()}} for r in rows]
    seeds = [{"precision": r["precision"], "seed": r["seed"], "val composite": f"{r['val_composite']:.4f}",
              "best at update": r["best_update"], "test Sharpe": f"{r['test_sharpe']:.4f}",
              "test return": f"{100 * r['test_total_return']:.2f}%", "train min": f"{r['train_min']:.1f}"}
             for r in records]
    compare = [{"metric": c["metric"], "difference": c["precisions"],
                "diff": f"{100 * c['diff']:.3f}%" if c["key"] in pct else f"{c['diff']:.4f}",
                "larger std": f"{100 * c['larger_std']:.3f}%" if c["key"] in pct else f"{c['larger_std']:.4f}",
                "within one std": "yes" if c["within_one_std"] else "no"} for c in comparisons]
    return "\n\n".join([format_records(summary), format_records(seeds), f"criterion: {CRITERION}",
                        format_records(compare) if compare else "(one precision: nothing to compare)"])


def verdict(comparisons: list[dict]) -> str:
    """Judged on the validation composite and the test Sharpe; the total return is shown, not judged."""
    judged = [c for c in comparisons if c["key"] in ("val_composite", "test_sharpe")]
    if not judged:
        return "nothing compared"
    ok = all(c["within_one_std"] for c in judged)
    return ("equivalent by the criterion: validation composite and test Sharpe within one std" if ok else
            "not shown equivalent: " + ", ".join(f"{c['metric']} ({c['precisions']}) outside one std"
                                                 for c in judged if not c["within_one_std"]))


def main() -> None:
    default_steps = load_config("default", []).train.total_steps
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3, help="seeds per precision (0..K-1; at least 3 to judge)")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=("fp32", "bf16", "fp16"),
                        help="launch.precision values; the first is the reference the others are compared with")
    parser.add_argument("--data", default="sp500", help="a built-in name (sp500, dow, synthetic) or a file")
    parser.add_argument("--config", default="default", help="named config or YAML file every run starts from")
    parser.add_argument("--steps", type=int, default=default_steps,
                        help=f"env steps per run (default {default_steps:,}: the default config's budget)")
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads per run (launch.threads_per_worker, and the test walk); 0: the trainer's "
                             "default, the machine's cores")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for every run, e.g. --set train.eval_every=5 (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("checkpoints/precision"), help="run folders")
    parser.add_argument("--json", action="store_true", help="print every number as one JSON object last")
    args = parser.parse_args()
    if args.seeds < 1 or args.steps < 1 or args.threads < 0:
        raise SystemExit("error: --seeds and --steps must be at least 1, --threads at least 0")
    if len(set(args.precisions)) != len(args.precisions):
        raise SystemExit("error: --precisions names a precision twice")
    if args.threads:
        torch.set_num_threads(args.threads)  # the test walk runs in this process too
    records = []
    for seed in range(args.seeds):  # seed-major: a stopped script leaves whole seeds of every precision
        for precision in args.precisions:
            print(f"== {precision}, seed {seed}", flush=True)
            records.append(one_run(args, precision, seed))
    rows, comparisons = summarise(records, args.precisions)
    print(show(rows, comparisons, records))
    print(f"verdict: {verdict(comparisons)}")
    if args.json:
        print(json.dumps({"data": args.data, "config": args.config, "steps": args.steps, "seeds": args.seeds,
                          "precisions": args.precisions, "criterion": CRITERION, "summary": rows,
                          "comparisons": comparisons, "verdict": verdict(comparisons), "per_seed": records,
                          "command": " ".join(["python", "scripts/studies/precision_equivalence.py", *sys.argv[1:]])}))


if __name__ == "__main__":
    main()
