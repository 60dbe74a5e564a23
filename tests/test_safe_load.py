"""A .pt file is data, never code: a crafted pickle given to every command that reads one is refused in one line
before any of it runs; the run state round-trips exactly; old checkpoints load only through the migrate step."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from test_scenarios import _bars_file, _data, _fit

from clstm_ppo.adapt import main as adapt_main
from clstm_ppo.cli import run_cli
from clstm_ppo.config import load_config
from clstm_ppo.evaluate import main as evaluate_main
from clstm_ppo.predict import main as predict_main
from clstm_ppo.run_files.run_state import RunState, load_checkpoint, save_checkpoint
from clstm_ppo.scenarios.__main__ import main as scenarios_main
from clstm_ppo.train import main as train_main

SMALL = ["train.num_envs=4", "ppo.num_steps=8", "ppo.num_minibatches=1", "ppo.update_epochs=1", "train.eval_every=1"]


class WritesMarker:
    """Unpickling this calls exec on code that writes ``marker``: what a crafted checkpoint can do."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('the payload ran')",)


@pytest.fixture(scope="module")
def agent_file(tmp_path_factory) -> Path:
    """An untrained agent's checkpoint as the trainer writes it, with every rank's state (no training: fast)."""
    from clstm_ppo.training.runner import Trainer

    folder = tmp_path_factory.mktemp("agent")
    trainer = Trainer(load_config("smoke", SMALL), folder / "run", torch.device("cpu"))
    save_checkpoint(trainer.run_state(), folder / "run" / "latest.pt")
    return folder / "run" / "latest.pt"


@pytest.fixture(scope="module")
def generator_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("generator")
    _fit(_data(_bars_file(folder / "A.csv")), "wgan_gp", folder / "wgan_gp.pt")
    return folder / "wgan_gp.pt"


def crafted(kind: str, real: Path, folder: Path) -> tuple[Path, Path]:
    """(a crafted file, the marker its payload would write): the payload alone, a real checkpoint of ``real`` with
    the payload under one extra key, or a bare pickle (not torch's archive) named .pt."""
    marker, path = folder / f"marker-{kind}", folder / f"crafted-{kind}.pt"
    if kind == "payload":
        torch.save({"state": WritesMarker(marker)}, path)
    elif kind == "extra_key":
        torch.save({**torch.load(real, weights_only=True), "note": WritesMarker(marker)}, path)
    else:
        path.write_bytes(pickle.dumps(WritesMarker(marker)))
    return path, marker


def one_line_error(capsys, main, argv: list[str]) -> str:
    capsys.readouterr()
    code = run_cli(main, argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and "\n" not in err, (code, err)
    return err


def test_the_crafted_payload_is_live_when_unpickled(agent_file, tmp_path):
    """The check the other tests rely on: a full unpickle of each crafted file runs its code."""
    for kind in ("payload", "extra_key", "bare_pickle"):
        path, marker = crafted(kind, agent_file, tmp_path)
        if kind == "bare_pickle":  # torch's legacy reader unpickles it as the file's magic number, then fails
            pickle.loads(path.read_bytes())
        else:
            torch.load(path, weights_only=False)
        assert marker.read_text() == "the payload ran", kind


AGENT_COMMANDS = {
    "train --resume-from": lambda bad, tmp: (train_main, ["--config", "smoke", "--checkpoint-dir", str(tmp / "runs"),
                                                          "--resume-from", str(bad)]),
    "evaluate --checkpoint": lambda bad, tmp: (evaluate_main, ["--checkpoint", str(bad)]),
    "predict": lambda bad, tmp: (predict_main, ["--checkpoint", str(bad), "--data", "synthetic"]),
    "adapt": lambda bad, tmp: (adapt_main, ["--checkpoint", str(bad), "--data", "synthetic", "--steps", "32",
                                            "--out", str(tmp / "runs")]),
}


@pytest.mark.parametrize("kind", ["payload", "extra_key", "bare_pickle"])
@pytest.mark.parametrize("command", list(AGENT_COMMANDS))
def test_every_command_refuses_a_crafted_agent_checkpoint_unread(agent_file, tmp_path, capsys, command, kind):
    bad, marker = crafted(kind, agent_file, tmp_path)
    main, argv = AGENT_COMMANDS[command](bad, tmp_path)
    err = one_line_error(capsys, main, argv)
    assert not marker.exists(), "the payload ran"
    assert "refused unread" in err and f"python -m clstm_ppo.migrate {bad} NEW.pt --trust" in err
    assert "checkpoint" in err and "builtins.exec" in err  # what the file is, and what it holds
    assert not (tmp_path / "runs").exists(), "nothing is written for a refused file"


GENERATOR_COMMANDS = {
    "evaluate --scenarios": lambda bad, agent, tmp: (evaluate_main, ["--checkpoint", str(agent), "--scenarios",
                                                                     str(bad), "--json", str(tmp / "out.json")]),
    "scenarios sample": lambda bad, agent, tmp: (scenarios_main, ["sample", "--checkpoint", str(bad), "--paths", "1",
                                                                  "--out", str(tmp / "out.csv")]),
    "scenarios report": lambda bad, agent, tmp: (scenarios_main, ["report", "--checkpoint", str(bad),
                                                                  "--json", str(tmp / "out.json")]),
}


@pytest.mark.parametrize("kind", ["payload", "extra_key"])
@pytest.mark.parametrize("command", list(GENERATOR_COMMANDS))
def test_every_command_refuses_a_crafted_generator_checkpoint_unread(agent_file, generator_file, tmp_path, capsys,
                                                                     command, kind):
    bad, marker = crafted(kind, generator_file, tmp_path)
    main, argv = GENERATOR_COMMANDS[command](bad, agent_file, tmp_path)
    err = one_line_error(capsys, main, argv)
    assert not marker.exists(), "the payload ran"
    assert "scenario checkpoint" in err and "refused unread" in err and "builtins.exec" in err
    assert not list(tmp_path.glob("out.*")), "nothing is written for a refused file"


def test_migrate_refuses_a_crafted_file_without_trust(agent_file, tmp_path, capsys):
    from clstm_ppo.migrate import main

    bad, marker = crafted("extra_key", agent_file, tmp_path)
    err = one_line_error(capsys, main, [str(bad), str(tmp_path / "new.pt")])
    assert "builtins.exec" in err and "--trust only if you trust" in err
    assert not marker.exists() and not (tmp_path / "new.pt").exists()


def same(a, b) -> bool:
    """Equal to the bit: tensors (dtype included), numpy arrays, containers and plain values."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same, a, b))
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(same(getattr(a, k), getattr(b, k)) for k in a.__dataclass_fields__)
    return type(a) is type(b) and a == b


def test_the_run_state_round_trips_as_plain_data(agent_file, tmp_path):
    raw = torch.load(agent_file, map_location="cpu", weights_only=True)  # loads as data
    assert (raw["format"], raw["version"]) == ("clstm_ppo-checkpoint", 2)
    state = load_checkpoint(agent_file)
    assert isinstance(state, RunState) and len(state.ranks) == 1 and state.update == 0
    save_checkpoint(state, tmp_path / "again.pt")
    assert same(load_checkpoint(tmp_path / "again.pt"), state)


def test_the_random_streams_continue_exactly_after_a_save_and_load(agent_file, tmp_path):
    """numpy's state (its key as a tensor, with a Gaussian cached) and Python's come back exactly: the draws after
    the load are those the process would have made next."""
    import random

    from clstm_ppo.run_files.run_state import RngState

    state = load_checkpoint(agent_file)
    np.random.seed(123)
    np.random.standard_normal()  # leaves one Gaussian cached in the state
    random.seed(9)
    rng = state.ranks[0].rng
    state.ranks[0].rng = RngState(rng.torch, np.random.get_state(), random.getstate(), rng.minibatches)
    assert state.ranks[0].rng.numpy[3] == 1
    expected = (np.random.random(4).tolist(), np.random.standard_normal(), random.random())
    save_checkpoint(state, tmp_path / "rng.pt")
    np.random.seed(0)
    random.seed(0)
    loaded = load_checkpoint(tmp_path / "rng.pt").ranks[0].rng
    np.random.set_state(loaded.numpy)
    random.setstate(loaded.python)
    assert (np.random.random(4).tolist(), np.random.standard_normal(), random.random()) == expected


@pytest.mark.parametrize(("change", "named"), [
    (lambda raw: raw.pop("optimizer"), "no field 'optimizer'"),
    (lambda raw: raw.pop("config"), "no field 'config'"),
    (lambda raw: raw.update(update="3"), "field 'update' is str, not int"),
    (lambda raw: raw["ranks"][0]["rng"]["numpy"].update(key=torch.zeros(624)),
     "field 'ranks[0].rng.numpy.key' is a torch.float32 tensor"),
    (lambda raw: raw["model"].update(extra=[1.0]), "field 'model.extra' is list, not a tensor"),
    (lambda raw: raw.update(version=3), "newer than this clstm_ppo's 2: upgrade clstm_ppo"),
])
def test_a_missing_or_mistyped_field_is_one_line_before_any_run_folder(agent_file, tmp_path, capsys, change, named):
    raw = torch.load(agent_file, weights_only=True)
    change(raw)
    torch.save(raw, tmp_path / "damaged.pt")
    err = one_line_error(capsys, train_main, ["--config", "smoke", "--checkpoint-dir", str(tmp_path / "runs"),
                                              "--resume-from", str(tmp_path / "damaged.pt")])
    assert named in err and ("damaged clstm_ppo checkpoint" in err or "upgrade" in err)
    assert not (tmp_path / "runs").exists()


def test_each_command_names_its_own_fix_for_a_truncated_checkpoint(agent_file, tmp_path, capsys):
    cut = tmp_path / "cut.pt"
    cut.write_bytes(agent_file.read_bytes()[:5000])
    for main, argv in ((evaluate_main, ["--checkpoint", str(cut)]),
                       (predict_main, ["--checkpoint", str(cut), "--data", "synthetic"])):
        err = one_line_error(capsys, main, argv)
        assert "truncated or corrupt" in err and "give --checkpoint another file" in err and "--resume-from" not in err
    err = one_line_error(capsys, train_main, ["--config", "smoke", "--checkpoint-dir", str(tmp_path),
                                              "--resume-from", str(cut)])
    assert "truncated or corrupt" in err and "--resume-from latest" in err


def test_what_a_checkpoint_is_written_from_is_made_plain_data_or_refused():
    """numpy arrays become tensors of the same dtype and values, numpy numbers Python ones; an object that is no data
    is a TypeError naming where it sits, so no file is written that would not load as data."""
    from clstm_ppo.run_files.safe_load import as_plain_data

    arrays = {"f32": np.arange(3, dtype=np.float32), "u8": np.array([1, 255], dtype=np.uint8)}
    plain = as_plain_data({"arrays": arrays, "n": np.float64(0.25), "k": (np.int64(3), "x", None)})
    for key, array in arrays.items():
        assert isinstance(plain["arrays"][key], torch.Tensor) and np.array_equal(plain["arrays"][key].numpy(), array)
        assert plain["arrays"][key].numpy().dtype == array.dtype
    assert plain["n"] == 0.25 and type(plain["n"]) is float
    assert plain["k"] == (3, "x", None) and type(plain["k"][0]) is int
    with pytest.raises(TypeError, match="'extra.hook' is a function"):
        as_plain_data({"extra": {"hook": lambda: None}})
    with pytest.raises(TypeError, match="'cells' is a numpy array of Python objects"):
        as_plain_data({"cells": np.array([object()], dtype=object)})


def test_a_generator_checkpoint_missing_a_field_is_one_line(generator_file, tmp_path, capsys):
    raw = torch.load(generator_file, weights_only=True)
    assert raw["format"] == "clstm_ppo-scenarios-v2"
    del raw["transform"]
    torch.save(raw, tmp_path / "damaged.pt")
    err = one_line_error(capsys, scenarios_main, ["sample", "--checkpoint", str(tmp_path / "damaged.pt"),
                                                  "--paths", "1", "--out", str(tmp_path / "out.csv")])
    assert "damaged scenario checkpoint (KeyError: 'transform')" in err and not (tmp_path / "out.csv").exists()
