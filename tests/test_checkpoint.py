"""Checkpoint writes: whole or not at all, and a failed write is one clear line."""
import errno

import pytest
import torch

from clstm_ppo.training import checkpoint
from clstm_ppo.training.checkpoint import CheckpointError, atomic_save, load_checkpoint


def test_a_write_that_fails_midway_leaves_the_previous_checkpoint_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "latest.pt"
    atomic_save({"format": checkpoint.FORMAT, "update": 1}, path)

    def disk_full(obj, fh):
        fh.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", disk_full)
    with pytest.raises(CheckpointError) as err:
        atomic_save({"format": checkpoint.FORMAT, "update": 2}, path)
    message = str(err.value)
    assert "No space left on device" in message and "the previous latest.pt is untouched" in message
    assert "--resume-from latest" in message and "\n" not in message
    monkeypatch.undo()
    assert load_checkpoint(path)["update"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["latest.pt"]


def test_an_unwritable_folder_says_no_checkpoint_was_written(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the run folder should be")
    with pytest.raises(CheckpointError, match="no latest.pt was written"):
        atomic_save({"x": torch.zeros(1)}, blocker / "latest.pt")
