"""``python -m clstm_ppo.tune``: hyperparameter search and seed sweeps on Optuna.

    clstm-ppo-tune --trials 40  # SQLite in checkpoints/tune/<study>/study.db
    clstm-ppo-tune --config smoke --trials 4 --steps 2048  # a minute on a CPU
    clstm-ppo-tune --trials 100 --storage postgresql://tune:secret@db-host/tune
        --study sp500-a  # on each machine

TPE draws each trial's settings from the search space (--space FILE.yaml; the default ships in the
package); each trial trains --seeds runs with them (the train command, in subprocesses) and scores
the mean over seeds of each run's best validation composite. The pruner reads the runs' validation
walks as they happen and stops a poor trial with SIGTERM, at an update boundary. The test split is
never read. At the end: best.yaml (a config for --config), importances.json, history.png and
summary.json in --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clstm_ppo.cli import run_cli
from clstm_ppo.tuning.search import tune


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="clstm-ppo-tune",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--data",
        default=None,
        help="a built-in name (sp500, dow, synthetic) or a file "
        "(default: the config's data.source)",
    )
    p.add_argument(
        "--config", default="default", help="named config or YAML file every trial starts from"
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for every trial, e.g. --set train.eval_every=5 (repeatable)",
    )
    p.add_argument(
        "--trials", type=int, required=True, help="trials in the study, counted over every worker"
    )
    p.add_argument(
        "--storage",
        default=None,
        help="SQLAlchemy URL shared by every worker, e.g. "
        "postgresql://user:password@host/db (default: a SQLite file in --out)",
    )
    p.add_argument("--study", default=None, help="study name (default: tune-<data>-<config>)")
    p.add_argument(
        "--space",
        default=None,
        help="search space YAML (default: the package's default_space.yaml)",
    )
    p.add_argument(
        "--steps", type=int, default=None, help="env steps per run (default: the config's budget)"
    )
    p.add_argument(
        "--seeds", type=int, default=1, help="runs per trial, seeds 0..K-1, trained side by side"
    )
    p.add_argument(
        "--n-jobs", "--n_jobs", type=int, default=1, help="trials at once in this process"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads per training run (launch.threads_per_worker)",
    )
    p.add_argument("--pruner", choices=("median", "hyperband", "none"), default="median")
    p.add_argument(
        "--sampler-seed",
        type=int,
        default=None,
        help="seeds TPE (one worker: reproducible draws; "
        "workers sharing a study need a seed each, or none: one seed draws the "
        "same first points twice)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run folders and the report (default: checkpoints/tune/<study>)",
    )
    return p


def trial_line(study, trial) -> None:
    """One line per finished trial: its composite (and each seed's), its pruning
    step or its error."""
    best = (
        f"best {study.best_value:.4f}"
        if any(t.state.name == "COMPLETE" for t in study.trials)
        else ""
    )
    if trial.state.name == "COMPLETE":
        seeds = ", ".join(f"{v:.4f}" for v in trial.user_attrs["seed_values"])
        what = f"composite {trial.value:.4f} (seeds {seeds})"
    elif trial.state.name == "PRUNED":
        what = f"pruned at {trial.user_attrs.get('pruned_at_step', 0):,} env steps"
    else:
        what = f"{trial.state.name.lower()}: {trial.user_attrs.get('error', '')}"
    print(f"trial {trial.number}: {what}" + (f"; {best}" if best else ""), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    done = tune(
        args.config,
        trials=args.trials,
        data=args.data,
        overrides=args.overrides,
        steps=args.steps,
        seeds=args.seeds,
        space=args.space,
        storage=args.storage,
        study=args.study,
        out=args.out,
        pruner=args.pruner,
        sampler_seed=args.sampler_seed,
        n_jobs=args.n_jobs,
        threads=args.threads,
        started=lambda line: print(line, flush=True),
        said=trial_line,
    )
    from clstm_ppo.tuning.study_outputs import summary_text

    print(summary_text(done.summary, done.study))
    if not done.summary["states"].get("complete") and not done.summary["states"].get("pruned"):
        print(
            "error: no trial of the study finished; each failed trial's log is in its trials/ "
            "folder (summary.json's failed entry gives each one's error)",
            file=sys.stderr,
        )
        return 1
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
