"""Tune from Python: a hyperparameter search (or seed sweep) on Optuna, each trial training its
seeds through the train command, scored on validation walks only; ``python -m clstm_ppo.tune``
prints it (docs/TUNING.md).

    from clstm_ppo.tuning.search import tune
    done = tune("smoke", trials=4, steps=2048, out=Path("checkpoints/tune/smoke"))
    done.summary["best"]["params"]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clstm_ppo.config import ConfigError, load_config
from clstm_ppo.market.observed import observed_market_data


@dataclass
class Search:
    """A finished search: its Optuna study, where it is stored (the password masked) and run, and
    the summary written to ``out``/summary.json."""

    study: Any  # optuna.Study (imported late: Optuna loads in seconds)
    storage: str
    out: Path
    summary: dict[str, Any]


def label(name: str | None) -> str:
    return Path(name).name.split(".")[0] if name else "default"


def tune(
    config: str | None = "default",
    *,
    trials: int,
    data: str | None = None,
    overrides: Sequence[str] = (),
    steps: int | None = None,
    seeds: int = 1,
    space: str | None = None,
    storage: str | None = None,
    study: str | None = None,
    out: Path | None = None,
    pruner: str = "median",
    sampler_seed: int | None = None,
    n_jobs: int = 1,
    threads: int = 1,
    started: Callable[[str], None] | None = None,
    said: Callable[[Any, Any], None] | None = None,
) -> Search:
    """Run ``trials`` trials (counted over every worker sharing ``storage``) of ``seeds`` runs of
    ``steps`` env steps each from ``config`` and ``overrides``; ``started`` is told the study's
    opening line, ``said`` is Optuna's callback after each trial. Bad arguments or data are one
    ConfigError or DataError before any trial."""
    for flag, value, least in (
        ("--trials", trials, 1),
        ("--seeds", seeds, 1),
        ("--n-jobs", n_jobs, 1),
        ("--threads", threads, 1),
        ("--steps", steps or 1, 1),
    ):
        if value < least:
            raise ConfigError(f"{flag} {value} must be at least {least}")
    overrides = list(overrides)
    base = load_config(config, [*overrides, *([f"data.source={data}"] if data else [])])
    if base.train.num_episodes > 0 and not steps:
        raise ConfigError(
            "the config budgets episodes (train.num_episodes); pass --steps N for the trials"
        )
    steps = steps or base.train.total_steps
    observed_market_data(base)  # a bad --data fails here, in one line, not in every trial
    name = study or f"tune-{label(base.data.source)}-{label(config)}"
    out = out or Path("checkpoints") / "tune" / name

    # Optuna and SQLAlchemy load in a second or two: only once the arguments are known to be sound.
    import optuna

    # one line per trial, ours, instead of Optuna's (which adds a traceback to each failed trial)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    from clstm_ppo.tuning.objective import Objective, TrialFailed, report_steps
    from clstm_ppo.tuning.runs import TrainSpec
    from clstm_ppo.tuning.space import load_space
    from clstm_ppo.tuning.study import (
        make_pruner,
        masked,
        open_storage,
        open_study,
        run_workers,
        storage_url,
    )
    from clstm_ppo.tuning.study_outputs import write_report

    params = load_space(space, config, [*overrides, f"train.total_steps={steps}"])
    spec = TrainSpec(config, data, steps, threads, overrides)
    url = storage_url(storage, out)
    setup = {
        "config": config,
        "data": data,
        "steps": steps,
        "seeds": seeds,
        "space": {p.key: [p.kind, p.low, p.high, p.log, p.step, list(p.choices)] for p in params},
        "overrides": overrides,
    }
    opened = open_study(
        open_storage(url),
        name,
        make_pruner(pruner, steps, report_steps(steps)[0]),
        sampler_seed,
        setup,
    )
    if started is not None:
        started(
            f"study {name} in {masked(url)}: {len(opened.trials)} of {trials} trial(s) there; "
            f"{seeds} seed(s) x {steps:,} env steps each; pruner {pruner}; runs in {out}"
        )
    run_workers(opened, Objective(params, spec, out, seeds), trials, n_jobs, (TrialFailed,), said)
    return Search(opened, masked(url), out, write_report(out, opened, spec, masked(url)))
