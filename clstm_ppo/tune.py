"""``python -m clstm_ppo.tune``: hyperparameter search and seed sweeps on Optuna.

    clstm-ppo-tune --trials 40                                   # SQLite in checkpoints/tune/<study>/study.db
    clstm-ppo-tune --config smoke --trials 4 --steps 2048         # a minute on a CPU
    clstm-ppo-tune --trials 100 --storage postgresql://tune:secret@db-host/tune --study sp500-a   # on each machine

TPE draws each trial's settings from the search space (--space FILE.yaml; the default ships in the package);
each trial trains --seeds runs with them (the train command, in subprocesses) and scores the mean over seeds
of each run's best validation composite. The pruner reads the runs' validation walks as they happen and
stops a poor trial with SIGTERM, at an update boundary. The test split is never read. At the end: best.yaml
(a config for --config), importances.json, history.png and summary.json in --out.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clstm_ppo.cli import run_cli
from clstm_ppo.config import ConfigError, load_config
from clstm_ppo.market.observed import observed_market_data


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clstm-ppo-tune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None, help="a built-in name (sp500, dow, synthetic) or a file "
                   "(default: the config's data.source)")
    p.add_argument("--config", default="default", help="named config or YAML file every trial starts from")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting for every trial, e.g. --set train.eval_every=5 (repeatable)")
    p.add_argument("--trials", type=int, required=True, help="trials in the study, counted over every worker")
    p.add_argument("--storage", default=None, help="SQLAlchemy URL shared by every worker, e.g. "
                   "postgresql://user:password@host/db (default: a SQLite file in --out)")
    p.add_argument("--study", default=None, help="study name (default: tune-<data>-<config>)")
    p.add_argument("--space", default=None, help="search space YAML (default: the package's default_space.yaml)")
    p.add_argument("--steps", type=int, default=None, help="env steps per run (default: the config's budget)")
    p.add_argument("--seeds", type=int, default=1, help="runs per trial, seeds 0..K-1, trained side by side")
    p.add_argument("--n-jobs", "--n_jobs", type=int, default=1, help="trials at once in this process")
    p.add_argument("--threads", type=int, default=1, help="CPU threads per training run (train.threads_per_worker)")
    p.add_argument("--pruner", choices=("median", "hyperband", "none"), default="median")
    p.add_argument("--sampler-seed", type=int, default=None, help="seeds TPE (one worker: reproducible draws; "
                   "workers sharing a study need a seed each, or none: one seed draws the same first points twice)")
    p.add_argument("--out", type=Path, default=None, help="run folders and the report (default: "
                   "checkpoints/tune/<study>)")
    return p


def label(name: str | None) -> str:
    return Path(name).name.split(".")[0] if name else "default"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for flag, value, least in (("--trials", args.trials, 1), ("--seeds", args.seeds, 1), ("--n-jobs", args.n_jobs, 1),
                               ("--threads", args.threads, 1), ("--steps", args.steps or 1, 1)):
        if value < least:
            raise ConfigError(f"{flag} {value} must be at least {least}")
    base = load_config(args.config, [*args.overrides, *([f"data.source={args.data}"] if args.data else [])])
    steps = args.steps or base.train.total_steps
    if base.train.num_episodes > 0 and not args.steps:
        raise ConfigError("the config budgets episodes (train.num_episodes); pass --steps N for the trials")
    observed_market_data(base)  # a bad --data fails here, in one line, not in every trial
    name = args.study or f"tune-{label(base.data.source)}-{label(args.config)}"
    out = args.out or Path("checkpoints") / "tune" / name

    # Optuna and SQLAlchemy load in a second or two: only once the arguments are known to be sound.
    import optuna

    # one line per trial, ours, instead of Optuna's (which adds a traceback to each failed trial)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    from clstm_ppo.tuning.objective import Objective, TrialFailed, report_steps
    from clstm_ppo.tuning.runs import TrainSpec
    from clstm_ppo.tuning.space import load_space
    from clstm_ppo.tuning.study import make_pruner, masked, open_storage, open_study, run_workers, storage_url
    from clstm_ppo.tuning.study_outputs import summary_text, write_report

    space = load_space(args.space, args.config, [*args.overrides, f"train.total_steps={steps}"])
    spec = TrainSpec(args.config, args.data, steps, args.threads, list(args.overrides))
    url = storage_url(args.storage, out)
    storage = open_storage(url)
    setup = {"config": args.config, "data": args.data, "steps": steps, "seeds": args.seeds,
             "space": {p.key: [p.kind, p.low, p.high, p.log, p.step, list(p.choices)] for p in space},
             "overrides": list(args.overrides)}
    study = open_study(storage, name, make_pruner(args.pruner, steps, report_steps(steps)[0]), args.sampler_seed,
                       setup)

    def said(study_: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        best = f"best {study_.best_value:.4f}" if any(t.state.name == "COMPLETE" for t in study_.trials) else ""
        if trial.state.name == "COMPLETE":
            seeds = ", ".join(f"{v:.4f}" for v in trial.user_attrs["seed_values"])
            what = f"composite {trial.value:.4f} (seeds {seeds})"
        elif trial.state.name == "PRUNED":
            what = f"pruned at {trial.user_attrs.get('pruned_at_step', 0):,} env steps"
        else:
            what = f"{trial.state.name.lower()}: {trial.user_attrs.get('error', '')}"
        print(f"trial {trial.number}: {what}" + (f"; {best}" if best else ""), flush=True)

    print(f"study {name} in {masked(url)}: {len(study.trials)} of {args.trials} trial(s) there; "
          f"{args.seeds} seed(s) x {steps:,} env steps each; pruner {args.pruner}; runs in {out}", flush=True)
    run_workers(study, Objective(space, spec, out, args.seeds), args.trials, args.n_jobs, (TrialFailed,), said)
    summary = write_report(out, study, spec, masked(url))
    print(summary_text(summary, study))
    if not summary["states"].get("complete") and not summary["states"].get("pruned"):
        print("error: no trial of the study finished; each failed trial's log is in its trials/ folder "
              "(summary.json's failed entry gives each one's error)", file=sys.stderr)
        return 1
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
