"""Converting a checkpoint written before checkpoints were plain data into today's format: the one
place a .pt is ever read with a full unpickle, and only when the caller says the file is trusted
(docs/RELIABILITY.md, "What is safe to load"). ``python -m clstm_ppo.migrate`` is its command line.

    from clstm_ppo.training.migration import migrate_checkpoint
    migrate_checkpoint("old/latest.pt", "new/latest.pt",
                       trust=True)  # -> "agent checkpoint, version 1 -> 2: ..."
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from clstm_ppo.config import first_line
from clstm_ppo.run_files import run_state
from clstm_ppo.run_files.checkpoint import CheckpointError, atomic_save
from clstm_ppo.run_files.safe_load import as_plain_data, named_objects
from clstm_ppo.scenarios import generator


def read_old(path: Path, trust: bool) -> tuple[Any, bool]:
    """``path``'s contents and whether a full unpickle read them: as data when it is plain data;
    otherwise only with ``trust``, since unpickling a file can call any function it names."""

    def unreadable(err: BaseException) -> CheckpointError:
        return CheckpointError(
            f"{path} is truncated or corrupt ({first_line(err, 120)}); nothing was converted"
        )

    try:
        return torch.load(path, map_location="cpu", weights_only=True), False
    except pickle.UnpicklingError as err:
        if "Weights only load failed" not in str(err):
            raise unreadable(err) from None
        objects = named_objects(path, str(err))
        if not trust:
            raise CheckpointError(
                f"{path} holds Python objects ({', '.join(objects[:3])}) that only a full unpickle "
                "reads, and a full unpickle runs whatever code the file names: add --trust only if "
                "you trust where the file came from"
            ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as err:
        raise unreadable(err) from None
    try:
        return torch.load(path, map_location="cpu", weights_only=False), True
    except Exception as err:  # noqa: BLE001
        # whatever a trusted but damaged pickle raises: one line
        raise unreadable(err) from None


def converted(saved: Any, path: Path) -> tuple[str, dict[str, Any]]:
    """(what the file is, its contents in today's format), or one CheckpointError line."""
    kind = saved.get("format") if isinstance(saved, dict) else None
    try:
        if kind == run_state.OLD_FORMAT:
            return "agent checkpoint, version 1", run_state.RunState.from_version_1(saved).to_file()
        if kind == run_state.FORMAT:
            return "agent checkpoint, already current", run_state.parse_run_state(
                saved, path
            ).to_file()
    except run_state.BadField as err:
        raise CheckpointError(
            f"{path} is a damaged clstm_ppo checkpoint ({err}); nothing was converted"
        ) from None
    if kind in (generator.OLD_FORMAT, generator.FORMAT):
        what = "scenario checkpoint, " + (
            "version 1" if kind == generator.OLD_FORMAT else "already current"
        )
        try:
            return what, {**as_plain_data(saved), "format": generator.FORMAT}
        except TypeError as err:
            raise CheckpointError(f"{path}: {err}; nothing was converted") from None
    raise CheckpointError(
        f"{path} is not a clstm_ppo checkpoint (its format is {kind!r}, not "
        f"{run_state.OLD_FORMAT!r} or {generator.OLD_FORMAT!r}); nothing was converted"
    )


def migrate_checkpoint(old: str | Path, new: str | Path, trust: bool = False) -> str:
    """Write ``old`` (an agent's or a scenario generator's checkpoint of any format this version
    knows) to ``new`` in today's format, read back as data before this returns; ``trust`` allows the
    full unpickle an old file needs. Returns one line saying what was done. ``new`` must not exist:
    nothing is overwritten."""
    old, new = Path(old), Path(new)
    if not old.is_file():
        raise CheckpointError(f"{old} not found; give the checkpoint file to convert")
    if new.exists():
        raise CheckpointError(
            f"{new} already exists; give a new file name for the converted checkpoint"
        )
    saved, unpickled = read_old(old, trust)
    what, contents = converted(saved, old)
    atomic_save(contents, new)
    try:  # today's readers accept it, as data, or it is not left behind
        if contents["format"] == generator.FORMAT:
            generator.load_generator(new)
        else:
            run_state.load_checkpoint(new)
    except CheckpointError:
        new.unlink()
        raise
    how = "a full unpickle (trusted)" if unpickled else "as data"
    return f"{old} ({what}, read {how}) -> {new} (read as data from now on)"
