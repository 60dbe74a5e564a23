"""A fixed grid of runs (the paper comparison's kind x window x seed) as the trials of a study,
so several processes or machines share the work through one storage and each gathers every
cell's result from it.

The process that creates the study queues one trial per cell; every process then claims queued
trials one at a time (the storage's WAITING -> RUNNING change is atomic, so a cell runs once), runs
them, and records each result in its trial. A worker that dies stops sending heartbeats: its cell is
failed and queued again.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from clstm_ppo.config import ConfigError
from clstm_ppo.tuning.study import HEARTBEAT_S, open_storage

Cell = dict[str, Any]


def cell_key(cell: Cell) -> str:
    return json.dumps(cell, sort_keys=True)


def open_grid(
    storage: optuna.storages.BaseStorage, name: str, cells: list[Cell], wait_s: float = 120.0
) -> optuna.Study:
    """The grid's study: created and filled by the first process, joined (once
    filled) by the others."""
    try:
        study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
    except optuna.exceptions.DuplicatedStudyError:
        # the unique study name decides, atomically, who fills it
        study = optuna.load_study(storage=storage, study_name=name)
        deadline = time.monotonic() + wait_s
        while "grid" not in study.user_attrs:
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"study {name!r} exists but holds no grid; name another --study"
                ) from None
            time.sleep(1.0)
        if study.user_attrs["grid"] != [cell_key(c) for c in cells]:
            raise ConfigError(
                f"study {name!r} holds another grid (other kinds, windows, seeds or data); "
                "run with the same arguments or name another --study"
            ) from None
        return study
    for cell in cells:
        study.enqueue_trial(cell, user_attrs={"cell": cell_key(cell)})
    study.set_user_attr("grid", [cell_key(c) for c in cells])  # last: joiners wait for it
    return study


def requeue_failed(study: optuna.Study, errors_too: bool) -> None:
    """Queue again each cell whose every trial failed: a dead worker's (its heartbeats
    stopped), and with ``errors_too`` one whose run raised (a new command retries those; its
    running peers do not)."""
    optuna.storages.fail_stale_trials(study)
    by_cell: dict[str, list[Any]] = {}
    for t in study.get_trials(deepcopy=False):
        by_cell.setdefault(t.user_attrs.get("cell", ""), []).append(t)
    for key, trials in by_cell.items():
        if key and all(
            t.state == TrialState.FAIL and (errors_too or "error" not in t.user_attrs)
            for t in trials
        ):
            study.enqueue_trial(json.loads(key), user_attrs={"cell": key})


def claim(study: optuna.Study, storage: optuna.storages.BaseStorage) -> tuple[int, Cell] | None:
    """(trial id, cell) of a queued trial this process now holds, or None when
    the queue is empty."""
    study_id = storage.get_study_id_from_name(study.study_name)
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        try:
            if storage.set_trial_state_values(trial_id, TrialState.RUNNING):
                return trial_id, json.loads(t.user_attrs["cell"])
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process claimed and finished it meanwhile
    return None


def run_claimed(
    storage: optuna.storages.BaseStorage,
    trial_id: int,
    cell: Cell,
    run_cell: Callable[[Cell], tuple[float, Any]],
) -> None:
    """Run one claimed cell with heartbeats; its value and result (JSON) go into its trial."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S / 2):
            storage.record_heartbeat(trial_id)

    storage.record_heartbeat(trial_id)
    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    try:
        value, result = run_cell(cell)
    except BaseException as err:
        # a SystemExit from a failed run included: record it, then let it go on
        storage.set_trial_user_attr(trial_id, "error", str(err)[:500])
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        raise
    finally:
        stop.set()
        beater.join()
    storage.set_trial_user_attr(trial_id, "result", result)
    storage.set_trial_state_values(trial_id, TrialState.COMPLETE, values=[value])


def run_grid(
    url: str,
    name: str,
    cells: list[Cell],
    run_cell: Callable[[Cell], tuple[float, Any]],
    poll_s: float = 5.0,
    say: Callable[[str], None] = print,
) -> list[Any]:
    """Run this process's share of the grid, wait for the other workers', and return every cell's
    result in the order of ``cells``."""
    storage = open_storage(url)
    study = open_grid(storage, name, cells)
    requeue_failed(study, errors_too=True)
    while True:
        requeue_failed(study, errors_too=False)
        claimed = claim(study, storage)
        if claimed is not None:
            trial_id, cell = claimed
            say(f"== grid {name}: {cell_key(cell)}")
            run_claimed(storage, trial_id, cell, run_cell)
            continue
        trials = study.get_trials(deepcopy=False)
        running = [t for t in trials if t.state == TrialState.RUNNING]
        if not running:
            break
        # or a dead worker's, queued again soon
        say(f"waiting for {len(running)} cell(s) running elsewhere")
        time.sleep(poll_s)
    done = {
        t.user_attrs["cell"]: t.user_attrs["result"]
        for t in trials
        if t.state == TrialState.COMPLETE and "result" in t.user_attrs
    }
    missing = [cell_key(c) for c in cells if cell_key(c) not in done]
    if missing:
        raise ConfigError(
            f"grid {name!r}: {len(missing)} cell(s) failed, e.g. {missing[0]}; see their "
            "trials' error attribute, then run again to retry them"
        )
    return [done[cell_key(c)] for c in cells]
