"""A run folder: which folders --fresh-start may move, where a launch may write, and which saved
settings never choose an output folder (docs/RELIABILITY.md, "Bad input"; a run name's own rule is
config/consistency.py's).

A run folder holds only what training writes there (checkpoints, the lock, config.yaml,
metrics.jsonl, W&B's and TensorBoard's files) and the reports the end of a run suggests writing
beside them; --fresh-start moves such a folder aside and refuses any other, so a name can never move
a folder of someone's own files.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path

from clstm_ppo.config import ConfigError, with_defaults_at
from clstm_ppo.run_files.checkpoint import BEST_METRICS

# Every file name training (and the evaluate command its farewell
# suggests) writes into a run folder.
RUN_FILES = re.compile(
    "|".join(
        [
            r"\.lock",
            r"config\.yaml",
            r"metrics\.jsonl(\.tmp)?",
            r"metrics\.dropped-[0-9-]+\.jsonl",
            r"pretrain_loss\.csv",
            r"wandb_run_id",
            r"latest\.pt",
            rf"best_({'|'.join(BEST_METRICS)})\.pt",
            r"update_\d+\.pt",
            r"\..+\.tmp-\d+",
            r"test_equity\.png",
            r"test_report\.json",
        ]
    )
)
WANDB_FOLDER = "wandb"  # wandb.init(dir=run_folder) keeps its files here
TENSORBOARD_FILE = re.compile(r"events\.out\.tfevents\..+")


def foreign_entry(run_dir: Path) -> str | None:
    """The first entry of ``run_dir`` that training never writes there (a name, with '/' for a
    folder), or None when every entry is a run's."""
    for entry in sorted(run_dir.iterdir()):
        if entry.is_symlink():
            return entry.name  # a link may point anywhere: never follow one while moving a run
        if entry.is_dir():
            if entry.name == WANDB_FOLDER or _is_tensorboard_folder(entry):
                continue
            return entry.name + "/"
        if not RUN_FILES.fullmatch(entry.name):
            return entry.name
    return None


def _is_tensorboard_folder(folder: Path) -> bool:
    files = list(folder.iterdir())
    return bool(files) and all(
        f.is_file() and not f.is_symlink() and TENSORBOARD_FILE.fullmatch(f.name) for f in files
    )


def check_fresh_start(run_dir: Path) -> None:
    """Before anything is touched: ``run_dir`` is a run folder of this project (or
    absent), else one line."""
    if run_dir.is_symlink() or (run_dir.exists() and not run_dir.is_dir()):
        raise ConfigError(
            f"--fresh-start: {run_dir} is not a run folder (a file or a link); --fresh-start moves "
            "only a folder training wrote: pick another --run-name"
        )
    if not run_dir.is_dir():
        return
    foreign = foreign_entry(run_dir)
    if foreign is not None:
        raise ConfigError(
            f"--fresh-start: {run_dir} holds '{foreign}', which training never writes, so it is "
            "not a run folder and was left as it is; move that out of it or pick another --run-name"
        )


def move_aside(run_dir: Path) -> Path | None:
    """--fresh-start: keep the old run under a dated name instead of deleting it
    (``check_fresh_start`` first)."""
    check_fresh_start(run_dir)
    if not run_dir.exists() or all(p.name == ".lock" for p in run_dir.iterdir()):
        return None  # nothing to keep
    target = run_dir.with_name(f"{run_dir.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
    counter = 1
    while target.exists():
        target = run_dir.with_name(f"{run_dir.name}.old-{time.strftime('%Y%m%d-%H%M%S')}-{counter}")
        counter += 1
    shutil.move(str(run_dir), str(target))
    return target


def check_writable_folder(folder: Path, flag: str) -> None:
    """``folder`` is (or can be made as) a folder this process can write in, else one line naming
    ``flag``'s fix. Checked by creating a nameless temporary file in the nearest existing folder, so
    a read-only mount or missing permission shows as it would at the first checkpoint, before
    anything is written."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(
            f"{flag} {folder}: {existing} is a file, not a folder; pass a folder (it is made if "
            "missing)"
        )
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise ConfigError(
            f"{flag} {folder}: cannot write in {existing} ({err.strerror or err}); choose a folder "
            "you can write to"
        ) from None


def remove_if_empty(run_dir: Path) -> None:
    """After a launch that failed before training wrote anything: drop the folder it made (holding
    at most the lock), so a refused launch leaves no empty run folder behind."""
    try:
        if run_dir.is_dir() and all(p.name == ".lock" for p in run_dir.iterdir()):
            (run_dir / ".lock").unlink(missing_ok=True)
            run_dir.rmdir()
    except OSError:
        # another process took it meanwhile, or it cannot be removed: it holds nothing either way
        pass


# The settings that say where a run writes: a file's saved settings never choose them
# (a shared checkpoint would choose where adapt or TensorBoard writes); the command
# line and the current config do.
OUTPUT_SETTINGS = ("output.checkpoint_dir", "output.run_name", "output.tensorboard")


def without_saved_outputs(saved_config: dict) -> dict:
    """A checkpoint's saved settings with the output folders reset to the defaults,
    for --set to choose."""
    return with_defaults_at(saved_config, OUTPUT_SETTINGS)
