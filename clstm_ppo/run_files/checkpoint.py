"""Checkpoints: atomic writes, best-model files, retention, and loading with clear errors.

A checkpoint is one torch file holding everything a resume needs, as plain data
(run_files/run_state.py); every .pt is read with torch.load(weights_only=True), which never runs
code from it. Files are written to a temporary name in the same folder, fsynced, then renamed over
the target, so a crash mid-write never leaves a damaged checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from clstm_ppo.config import first_line
from clstm_ppo.run_files.safe_load import refusal_line

# The validation metrics a run keeps a best_<metric>.pt for (``training/selection.py`` picks them).
BEST_METRICS = ("composite", "composite_smoothed", "win_rate", "profit_rate", "sharpe")
RESUME_CHOICES = (*BEST_METRICS, "latest")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used, phrased as one line with the fix."""


def atomic_save(obj: Any, path: Path) -> None:
    """Write ``obj`` to ``path`` whole or not at all; a failed write (e.g. a full disk) is
    a CheckpointError."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            try:
                torch.save(obj, fh)
            except RuntimeError as err:
                # torch's zip writer reports a failed write as its own error
                raise OSError(_write_failure(fh, err)) from None
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)  # atomic on POSIX and Windows
    except OSError as err:
        kept = (
            f"the previous {path.name} is untouched"
            if path.exists()
            else f"no {path.name} was written"
        )
        raise CheckpointError(
            f"could not write checkpoint {path} ({err.strerror or err}); {kept}; free disk space "
            "or choose another --checkpoint-dir, then continue with --resume-from latest"
        ) from None
    finally:
        with contextlib.suppress(OSError):  # nothing to remove, or the folder itself is unusable
            tmp.unlink()


def read_torch_file(path: Path, what: str, missing: str, corrupt: str) -> Any:
    """The tensors and plain values torch saved at ``path`` (on the CPU), read as data: never code,
    whatever the file holds. Otherwise one CheckpointError line: ``what`` (e.g. "checkpoint") not
    found (then ``missing``, the caller's fix), holding Python objects (what they are, and the
    migrate step), or truncated or corrupt (then ``corrupt``, the caller's fix)."""
    if not path.is_file():
        raise CheckpointError(f"{what} {path} not found; {missing}")
    try:
        with warnings.catch_warnings():
            # torch's note on a pickle protocol it did not write: the refusal says more
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "Weights only load failed" in str(err):  # refused before any object was built
            raise CheckpointError(refusal_line(path, what, str(err))) from None
        raise CheckpointError(
            f"{what} {path} is truncated or corrupt ({first_line(err, 120)}); {corrupt}"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
        raise CheckpointError(
            f"{what} {path} is truncated or corrupt ({first_line(err, 120)}); {corrupt}"
        ) from None


def resolve_resume(choice: str, run_dir: Path) -> Path:
    """``composite``/``win_rate``/``profit_rate``/``sharpe``/``latest`` in
    ``run_dir``, or a path."""
    if choice in RESUME_CHOICES:
        name = "latest.pt" if choice == "latest" else f"best_{choice}.pt"
        return run_dir / name
    path = Path(choice)
    if path.suffix == ".pt" or path.exists():
        return path
    raise CheckpointError(
        f"--resume-from {choice!r} is neither a checkpoint file nor one of: "
        f"{', '.join(RESUME_CHOICES)}"
    )


def _write_failure(fh: Any, err: RuntimeError) -> str:
    """Why torch.save could not write: the OS's reason, found by writing one more byte,
    else torch's words."""
    try:
        fh.write(b"\0")
        fh.flush()
    except OSError as os_err:
        return os_err.strerror or str(os_err)
    return first_line(err, 100)


def remove_stale_writes(run_dir: Path) -> list[str]:
    """Delete the temporary files of checkpoint writes that a killed process never finished
    (``atomic_save``'s ``.<name>.tmp-<pid>``); call it only while holding the run's lock, when no
    write of this run is under way."""
    stale = sorted(run_dir.glob(".*.tmp-*")) if run_dir.is_dir() else []
    for path in stale:
        with contextlib.suppress(OSError):
            path.unlink()
    return [p.name for p in stale]


def atomic_link(source: Path, path: Path, state: dict[str, Any]) -> None:
    """``path`` becomes a second name of ``source``'s file (a hard link, put in place by an atomic
    rename), or, where the file system has no hard links, a copy of ``state`` written by
    ``atomic_save``. Every write replaces a file by renaming a new one over it, so a later latest.pt
    never changes what a link to an earlier one holds."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.link(source, tmp)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        atomic_save(state, path)


class CheckpointManager:
    """Writes latest.pt, best_<metric>.pt and the last ``keep_last`` periodic
    checkpoints of one run."""

    def __init__(self, run_dir: Path, keep_last: int):
        self.run_dir, self.keep_last = run_dir, keep_last

    def save(
        self, state: dict[str, Any], periodic: int | None = None, best: tuple[str, ...] = ()
    ) -> Path:
        """latest.pt, and as other names of that one file (one write at 65,536 copies' hundreds of
        MB, not one per name) update_<periodic>.pt and best_<metric>.pt of each metric in ``best``;
        returns latest.pt's path."""
        latest = self.run_dir / "latest.pt"
        atomic_save(state, latest)
        for metric in best:
            atomic_link(latest, self.run_dir / f"best_{metric}.pt", state)
        if periodic is not None:
            atomic_link(latest, self.run_dir / f"update_{periodic:07d}.pt", state)
            kept = sorted(self.run_dir.glob("update_*.pt"))
            for old in kept[: max(0, len(kept) - self.keep_last)]:
                old.unlink()
        return latest


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run folder for one training process: a second one (e.g. the same
    resume started twice)
    is refused instead of interleaving its checkpoints with the first's. The OS drops the lock if
    the holder dies, so a crash never leaves the folder locked."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no advisory locks, run unguarded
        yield
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / ".lock", "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            raise CheckpointError(
                f"{run_dir} is in use by a training process ({holder}); wait for it to finish "
                "or stop it, or train into another folder with --run-name"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def has_run(run_dir: Path) -> bool:
    return run_dir.is_dir() and any(run_dir.glob("*.pt"))
