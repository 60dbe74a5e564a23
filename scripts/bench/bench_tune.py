"""Wall time of one tuning study run by one worker process and by two worker processes sharing one SQLite
study (the issue's goal: two take <= 0.6x the time of one, from parallelism plus pruning).

    python scripts/bench/bench_tune.py [--config smoke] [--trials 8] [--steps 5120] [--pruner median] [--repeats 3]
        [--json]

Each configuration runs the same study (same --config, --space, --steps, --trials; worker i has --sampler-seed i)
from an empty SQLite file in a temporary folder: `clstm-ppo-tune` processes, one thread per training run. The
table gives the wall time, the trials that completed and were pruned, and the ratio to one worker. With
--repeats R the two configurations alternate R times (this machine's speed drifts), each pair's ratio is kept,
and the last row gives the medians.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

from clstm_ppo.tables import print_table


def run_study(workers: int, args: argparse.Namespace, folder: Path, repeat: int) -> dict[str, float]:
    url = f"sqlite:///{folder / f'r{repeat}-w{workers}.db'}"
    command = [sys.executable, "-m", "clstm_ppo.tune", "--config", args.config, "--trials", str(args.trials),
               "--steps", str(args.steps), "--storage", url, "--study", "bench", "--pruner", args.pruner,
               *(["--space", args.space] if args.space else []),
               *[x for s in args.overrides for x in ("--set", s)]]
    started = time.perf_counter()
    # each worker its own sampler seed: workers given one seed would draw the same first points (TPE's random
    # start-up trials come from the seeded generator), and the study would train each of them twice
    procs = [subprocess.Popen([*command, "--sampler-seed", str(i), "--out", str(folder / f"r{repeat}-w{workers}-{i}")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(workers)]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"error: a tune worker failed: {err.strip().splitlines()[-1:] or p.returncode}")
    seconds = time.perf_counter() - started
    trials = optuna.load_study(study_name="bench", storage=url).get_trials()
    count = {s: sum(t.state == s for t in trials) for s in optuna.trial.TrialState}
    return {"repeat": repeat, "workers": workers, "wall_s": seconds, "trials": len(trials),
            "complete": count[optuna.trial.TrialState.COMPLETE], "pruned": count[optuna.trial.TrialState.PRUNED]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="smoke")
    parser.add_argument("--space", default=None, help="search space YAML (default: the package's)")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5120, help="env steps per trial run")
    parser.add_argument("--pruner", default="median", choices=("median", "hyperband", "none"))
    parser.add_argument("--repeats", type=int, default=1, help="alternate one and two workers this many times")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.repeats < 1:
        raise SystemExit(f"error: --repeats {args.repeats} must be at least 1")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as folder:
        for repeat in range(args.repeats):
            one, two = (run_study(workers, args, Path(folder), repeat) for workers in (1, 2))
            one["ratio_to_one"], two["ratio_to_one"] = 1.0, two["wall_s"] / one["wall_s"]
            rows += [one, two]
    if args.repeats > 1:
        for workers in (1, 2):
            mine = [r for r in rows if r["workers"] == workers]
            medians = {k: statistics.median(r[k] for r in mine) for k in mine[0] if k not in ("repeat", "workers")}
            rows.append({"repeat": "median", "workers": workers, **medians})
    print_table(rows, args.json, {"config": args.config, "trials": args.trials, "steps": args.steps,
                                  "pruner": args.pruner, "goal": "ratio_to_one <= 0.6 with 2 workers"})


if __name__ == "__main__":
    main()
