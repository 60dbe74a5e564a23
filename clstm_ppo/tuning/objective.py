"""A trial: draw the settings, train K seeds side by side, report their mean best validation
composite to the pruner as the runs go, and stop them all with SIGTERM when the pruner says so.

The trainer's own validation walks are the only scores read: no trial ever
evaluates on the test split.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import Any

import optuna

from clstm_ppo.tuning.runs import TrainRun, TrainSpec
from clstm_ppo.tuning.space import Param, as_overrides

# Runs of different batch sizes (train.num_envs is tunable) evaluate at different env steps, and the
# pruners compare trials step by step: so every trial reports at the same points of the budget.
REPORT_POINTS = 10


class TrialFailed(RuntimeError):
    """A training run of the trial exited with an error; the study records the trial as
    failed and goes on."""


def report_steps(total_steps: int, points: int = REPORT_POINTS) -> list[int]:
    """The env-step marks at which every trial reports (the last is the whole budget)."""
    marks = sorted({max(1, round(total_steps * k / points)) for k in range(1, points + 1)})
    return [m for m in marks if m <= total_steps]


def run_dir_for(out: Path, trial_number: int, seed: int) -> Path:
    return out / "trials" / f"trial{trial_number:04d}-seed{seed}"


class Objective:
    """Callable Optuna objective; one instance serves every thread of a worker (it keeps no
    per-trial state)."""

    def __init__(
        self,
        space: list[Param],
        spec: TrainSpec,
        out: Path,
        seeds: int,
        poll_s: float = 1.0,
        say: Any = print,
    ):
        self.space, self.spec, self.out, self.seeds = space, spec, out, seeds
        self.poll_s, self.say = poll_s, say

    def __call__(self, trial: optuna.Trial) -> float:
        values = {p.key: p.suggest(trial) for p in self.space}
        return self.run(trial, values)

    def run(self, trial: Any, values: dict[str, Any]) -> float:
        """Train every seed with ``values``; the mean over seeds of each run's best
        validation composite."""
        sets = as_overrides(values)
        runs = [
            TrainRun(self.spec, run_dir_for(self.out, trial.number, seed), seed, sets)
            for seed in range(self.seeds)
        ]
        trial.set_user_attr("run_dirs", [str(r.run_dir) for r in runs])
        trial.set_user_attr("overrides", sets)
        marks = report_steps(self.spec.steps)
        try:
            while True:
                # polled before reading: a finished run's file is complete
                done = [r.finished() for r in runs]
                for r in runs:
                    r.read()
                failed = [
                    r for r, d in zip(runs, done, strict=True) if d and r.process.returncode != 0
                ]
                if failed:
                    self._fail(
                        trial,
                        f"seed {failed[0].seed} exited {failed[0].process.returncode}: "
                        f"{failed[0].last_error()} (log: {failed[0].log_path})",
                    )
                # Past a mark means a later update seen (or the run done): the validation walk
                # of the mark's own update is logged after its update record, and reading
                # between the two would miss it.
                while marks and all(
                    d or r.last_step > marks[0] for r, d in zip(runs, done, strict=True)
                ):
                    self._report(trial, runs, marks.pop(0))
                if all(done):
                    break
                time.sleep(self.poll_s)
        finally:
            for r in runs:  # a pruned trial, a failure or a Ctrl-C: no run outlives its trial
                if not r.finished():
                    r.stop()
                r.close()
        per_seed = [r.best() for r in runs]
        trial.set_user_attr("seed_values", per_seed)
        if not all(math.isfinite(v) for v in per_seed):
            self._fail(trial, f"a run finished without a finite validation composite: {per_seed}")
        trial.set_user_attr("seed_std", statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0)
        return statistics.fmean(per_seed)

    @staticmethod
    def _fail(trial: Any, reason: str) -> None:
        # Optuna keeps no reason for a failed trial; the summary shows it
        trial.set_user_attr("error", reason)
        raise TrialFailed(reason)

    def _report(self, trial: Any, runs: list[TrainRun], mark: int) -> None:
        """Report the seeds' mean best-so-far at ``mark``; on the pruner's word, stop
        every run and prune."""
        value = statistics.fmean(r.best_until(mark) for r in runs)
        if not math.isfinite(value):
            return  # no validation walk yet at this mark (a long eval_every): nothing to compare
        trial.report(value, mark)
        if trial.should_prune():
            codes = [r.stop() for r in runs]
            trial.set_user_attr("pruned_at_step", mark)
            trial.set_user_attr("stop_exit_codes", codes)
            raise optuna.TrialPruned(
                f"trial {trial.number} pruned at {mark:,} env steps "
                f"(mean best composite {value:.4f})"
            )
