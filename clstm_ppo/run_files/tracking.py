"""Where a run reports: console (tqdm bar and the episode line), metrics.jsonl, and optionally
wandb and TensorBoard."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from tqdm import tqdm

from clstm_ppo.config import ConfigError, first_line
from clstm_ppo.tables import strict_json


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN
    return value


# in the run folder: a resume logs into the same W&B run, a fresh start into a new one
WANDB_ID_FILE = "wandb_run_id"


def start_wandb(run_dir: Path, project: str, run_name: str, config: dict[str, Any]) -> Any:
    """The W&B run of this run folder (the one it logged to before, if any); a failure is one
    line with the fix."""
    import wandb  # imported only when asked for: it is slow to import

    id_file = run_dir / WANDB_ID_FILE
    run_id = id_file.read_text().strip() if id_file.is_file() else uuid.uuid4().hex[:12]
    try:
        run = wandb.init(
            project=project,
            name=run_name,
            config=config,
            dir=str(run_dir),
            id=run_id,
            resume="allow",
        )
    except wandb.errors.Error as err:
        reason = first_line(err).rstrip(".")
        raise ConfigError(
            f"--wandb could not start a W&B run ({reason}): log in with `wandb login` "
            "(or set WANDB_API_KEY), or set WANDB_MODE=offline to log locally and `wandb sync` "
            "the run folder later"
        ) from None
    id_file.write_text(run_id)
    return run


def start_tensorboard(folder: str) -> Any:
    """TensorBoard's writer into ``folder`` (made if missing), or a one-line
    error saying why not."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package
    except ImportError as err:
        raise ConfigError(
            f"--tensorboard needs the tensorboard package ({first_line(err)}): "
            "pip install tensorboard"
        ) from None
    try:
        return SummaryWriter(log_dir=folder)
    except OSError as err:
        raise ConfigError(
            f"--tensorboard {folder}: cannot write there ({err.strerror}); choose another folder"
        ) from None


def tidy_metrics(path: Path, up_to_step: int) -> str | None:
    """Before a resume from ``up_to_step``: move metrics.jsonl's records past it (work logged after
    the checkpoint resumed from, which the resume does again: a run killed before its next
    checkpoint, or a resume from an earlier checkpoint of the run) into metrics.dropped-<time>.jsonl
    beside it, and drop a torn last line, rewriting the file atomically; says what went where, or
    None. Nothing logged is ever deleted."""
    if not path.is_file():
        return None
    kept, dropped, torn = [], [], 0
    for line in path.read_text().splitlines(keepends=True):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            torn += 1
            continue
        if not line.endswith("\n"):
            # a whole record whose newline never came: the next record would be glued onto it
            torn += 1
            continue
        if record.get("step", 0) > up_to_step:
            dropped.append(line)
            continue
        kept.append(line)
    if not (dropped or torn):
        return None
    kept_aside = ""
    if dropped:
        aside = path.with_name(f"metrics.dropped-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
        counter = 1
        while aside.exists():
            aside = path.with_name(
                f"metrics.dropped-{time.strftime('%Y%m%d-%H%M%S')}-{counter}.jsonl"
            )
            counter += 1
        tmp = aside.with_name(aside.name + ".tmp")
        tmp.write_text("".join(dropped))
        tmp.replace(aside)  # kept before metrics.jsonl loses them
        last = json.loads(dropped[-1]).get("step", 0)
        kept_aside = (
            f"moved {len(dropped)} record(s) past step {up_to_step:,} (to step {last:,}), logged "
            f"after the checkpoint this resume starts from and trained again now, to {aside.name}"
        )
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(kept))
    tmp.replace(path)
    torn_part = f"dropped {torn} torn line(s)" if torn else ""
    return "metrics.jsonl: " + "; ".join(p for p in (kept_aside, torn_part) if p)


class Tracker:
    """Rank 0's reporting; other ranks never build one."""

    def __init__(
        self,
        run_dir: Path,
        total_steps: int | None,
        config: dict[str, Any],
        use_wandb: bool,
        wandb_project: str,
        run_name: str,
        initial_steps: int = 0,
        tensorboard: str = "",
        progress: bool = True,
    ):
        # W&B and TensorBoard first: when one cannot start, nothing else has been opened or drawn.
        self.wandb = start_wandb(run_dir, wandb_project, run_name, config) if use_wandb else None
        self.tensorboard = start_tensorboard(tensorboard) if tensorboard else None
        tidied = tidy_metrics(run_dir / "metrics.jsonl", initial_steps) if initial_steps else None
        self.jsonl = open(run_dir / "metrics.jsonl", "a", buffering=1)
        interactive = sys.stderr.isatty()  # in a log file, redraw the bar rarely
        self.bar = tqdm(
            total=total_steps,
            initial=initial_steps,
            unit="step",
            dynamic_ncols=True,
            desc="train",
            smoothing=0.1,
            mininterval=0.5 if interactive else 30.0,
            disable=not progress,
        )
        self.started = time.time()
        if tidied:
            self.write(tidied)

    def log(self, kind: str, step: int, values: dict[str, Any]) -> None:
        record = {
            "kind": kind,
            "step": step,
            "time": round(time.time() - self.started, 3),
            **{k: _clean(v) for k, v in values.items()},
        }
        try:
            self.jsonl.write(strict_json(record) + "\n")
        except OSError as err:
            # a full disk or a file-size limit: one line, and the checkpoints stay whole
            raise ConfigError(
                f"could not write {self.jsonl.name} ({err.strerror or err}); latest.pt holds the "
                "last finished update; free disk space, then continue with --resume-from latest"
            ) from None
        numbers = {
            f"{kind}/{k}": v
            for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if self.wandb is not None:
            self.wandb.log(numbers, step=step)
        if self.tensorboard is not None:
            for tag, value in numbers.items():
                self.tensorboard.add_scalar(tag, value, global_step=step)

    def progress(self, steps: int, postfix: dict[str, str]) -> None:
        self.bar.update(steps)
        self.bar.set_postfix(postfix, refresh=False)

    def write(self, line: str) -> None:
        tqdm.write(line)

    def close(self) -> None:
        self.bar.close()
        with contextlib.suppress(OSError):
            # after a failed write (said in its one line) the flush fails again
            self.jsonl.close()
        if self.wandb is not None:
            self.wandb.finish()
        if self.tensorboard is not None:
            self.tensorboard.close()
