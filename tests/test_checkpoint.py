"""Checkpoint writes: whole or not at all, and a failed write is one clear line."""
import errno

import pytest
import torch

from clstm_ppo.run_files import checkpoint
from clstm_ppo.run_files.checkpoint import CheckpointError, atomic_save
from clstm_ppo.run_files.run_state import RunState, load_checkpoint


def state(update: int) -> dict:
    """A checkpoint's contents, as RunState writes them, of a run at ``update`` (no model: the files are the point)."""
    return RunState(model={"w": torch.full((2,), float(update))}, optimizer={"state": {}, "param_groups": []},
                    scaler=None, update=update, global_step=update * 8, episodes=0, config={},
                    normalizer={"names": [], "mean": [], "std": []}, world_size=1, num_envs=1).to_file()


def test_a_write_that_fails_midway_leaves_the_previous_checkpoint_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "latest.pt"
    atomic_save(state(1), path)

    def disk_full(obj, fh):
        fh.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", disk_full)
    with pytest.raises(CheckpointError) as err:
        atomic_save(state(2), path)
    message = str(err.value)
    assert "No space left on device" in message and "the previous latest.pt is untouched" in message
    assert "--resume-from latest" in message and "\n" not in message
    monkeypatch.undo()
    assert load_checkpoint(path).update == 1
    assert [p.name for p in tmp_path.iterdir()] == ["latest.pt"]


def test_an_unwritable_folder_says_no_checkpoint_was_written(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the run folder should be")
    with pytest.raises(CheckpointError, match="no latest.pt was written"):
        atomic_save({"x": torch.zeros(1)}, blocker / "latest.pt")


def test_best_and_periodic_checkpoints_are_other_names_of_latest_and_keep_their_update(tmp_path):
    """One write per update boundary: update_<n>.pt and the new best_<metric>.pt are hard links to latest.pt, and
    replacing latest.pt later leaves them holding update n; retention keeps the last ``keep_last`` periodic ones."""
    manager = checkpoint.CheckpointManager(tmp_path, keep_last=2)
    manager.save(state(1), periodic=1, best=("composite", "sharpe"))
    names = ("latest.pt", "update_0000001.pt", "best_composite.pt", "best_sharpe.pt")
    assert len({(tmp_path / n).stat().st_ino for n in names}) == 1
    for update in (2, 3):
        manager.save(state(update), periodic=update, best=("sharpe",) if update == 3 else ())
    assert {p.name for p in tmp_path.glob("update_*.pt")} == {"update_0000002.pt", "update_0000003.pt"}
    held = {n: load_checkpoint(tmp_path / n).update for n in ("latest.pt", "best_composite.pt", "best_sharpe.pt")}
    assert held == {"latest.pt": 3, "best_composite.pt": 1, "best_sharpe.pt": 3}
    assert not list(tmp_path.glob(".*.tmp-*")), "no temporary name is left behind"


def test_without_hard_links_the_other_names_are_copies(tmp_path, monkeypatch):
    """A file system that refuses hard links (some network and FAT mounts) gets whole copies instead."""
    def refuse(source, target):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(checkpoint.os, "link", refuse)
    checkpoint.CheckpointManager(tmp_path, keep_last=1).save(state(4), periodic=4, best=("composite",))
    inodes = {(tmp_path / n).stat().st_ino for n in ("latest.pt", "update_0000004.pt", "best_composite.pt")}
    assert len(inodes) == 3
    assert load_checkpoint(tmp_path / "best_composite.pt").update == 4
    assert not list(tmp_path.glob(".*.tmp-*"))
