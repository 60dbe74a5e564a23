"""python -m clstm_ppo.migrate: checkpoints of the older formats (numpy arrays inside) load only through it; what it
writes resumes bit for bit as the original run would have, and samples the same paths."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from smoke_training import train
from test_safe_load import one_line_error
from test_scenarios import _bars_file, _data, _fit

from clstm_ppo.evaluate import main as evaluate_main
from clstm_ppo.migrate import main as migrate_main
from clstm_ppo.run_files.run_state import RunState, load_checkpoint
from clstm_ppo.scenarios.__main__ import main as scenarios_main
from clstm_ppo.scenarios.generator import load_generator

RUN = "synthetic-smoke"
COMMON = ["--set", "train.num_envs=8", "--set", "ppo.num_minibatches=1", "--set", "train.eval_every=2",
          "--set", "ppo.lr_schedule=constant", "--set", "launch.threads_per_worker=1"]
UPDATE = 8 * 32  # env steps an update: 8 copies x the smoke config's 32 steps


def version_1(state: RunState) -> dict:
    """``state`` as the trainer wrote it before checkpoints were plain data (clstm_ppo-checkpoint-v1): an untyped
    dict with rank 0's state at the top level, ranks 1.. in other_ranks and numpy's random state as numpy pickled
    it (an ndarray of uint32 words inside)."""
    def rank(r) -> dict:
        return {"rng": {"torch": r.rng.torch, "numpy": r.rng.numpy, "python": r.rng.python,
                        "minibatches": r.rng.minibatches}, "env": r.env, "lstm_state": r.lstm_state,
                "portfolio": r.portfolio}

    assert isinstance(state.ranks[0].rng.numpy[1], np.ndarray)
    return {"format": "clstm_ppo-checkpoint-v1", "model": state.model, "optimizer": state.optimizer,
            "scaler": state.scaler, "update": state.update, "global_step": state.global_step,
            "episodes": state.episodes, **rank(state.ranks[0]), "other_ranks": [rank(r) for r in state.ranks[1:]],
            "config": state.config, "normalizer": state.normalizer, "world_size": state.world_size,
            "num_envs": state.num_envs, **state.selection_state()}


def test_an_old_agent_checkpoint_loads_only_through_migrate_and_then_resumes_exactly(tmp_path, capsys):
    assert train(tmp_path / "a", "--total-steps", str(2 * UPDATE), *COMMON) == 0
    latest = tmp_path / "a" / RUN / "latest.pt"
    old = tmp_path / "old.pt"
    torch.save(version_1(load_checkpoint(latest)), old)
    with pytest.raises(Exception, match="Weights only load failed"):  # numpy inside: not plain data
        torch.load(old, weights_only=True)

    err = one_line_error(capsys, evaluate_main, ["--checkpoint", str(old)])
    assert "holds numpy arrays" in err and f"python -m clstm_ppo.migrate {old} NEW.pt --trust" in err
    new = tmp_path / "new.pt"
    err = one_line_error(capsys, migrate_main, [str(old), str(new)])
    assert "numpy" in err and "--trust only if you trust" in err and not new.exists()

    assert migrate_main([str(old), str(new), "--trust"]) == 0
    assert "agent checkpoint, version 1, read a full unpickle (trusted)" in capsys.readouterr().out
    migrated, original = load_checkpoint(new), load_checkpoint(latest)
    assert migrated.update == original.update == 2 and migrated.best == original.best
    assert np.array_equal(migrated.ranks[0].rng.numpy[1], original.ranks[0].rng.numpy[1])
    assert migrated.ranks[0].rng.numpy[2:] == original.ranks[0].rng.numpy[2:]
    err = one_line_error(capsys, migrate_main, [str(old), str(new), "--trust"])
    assert "already exists" in err

    # the migrated file in place of latest.pt resumes exactly as the original does
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.copy(new, tmp_path / "b" / RUN / "latest.pt")
    for run in ("a", "b"):
        assert train(tmp_path / run, "--total-steps", str(4 * UPDATE), "--resume-from", "latest", *COMMON) == 0
    a, b = (load_checkpoint(tmp_path / run / RUN / "latest.pt") for run in ("a", "b"))
    assert a.update == b.update == 4
    for name in a.model:
        assert torch.equal(a.model[name], b.model[name]), name
    assert evaluate_main(["--checkpoint", str(new), "--json", str(tmp_path / "report.json")]) == 0


def test_a_current_checkpoint_migrates_as_data_without_trust(tmp_path, capsys):
    from test_safe_load import SMALL, same

    from clstm_ppo.config import load_config
    from clstm_ppo.run_files.run_state import save_checkpoint
    from clstm_ppo.training.runner import Trainer

    trainer = Trainer(load_config("smoke", SMALL), tmp_path / "run", torch.device("cpu"))
    save_checkpoint(trainer.run_state(), tmp_path / "now.pt")
    assert migrate_main([str(tmp_path / "now.pt"), str(tmp_path / "copy.pt")]) == 0
    assert "already current, read as data" in capsys.readouterr().out
    assert same(load_checkpoint(tmp_path / "copy.pt"), load_checkpoint(tmp_path / "now.pt"))
    torch.save({"format": "something-else"}, tmp_path / "other.pt")
    err = one_line_error(capsys, migrate_main, [str(tmp_path / "other.pt"), str(tmp_path / "x.pt")])
    assert "is not a clstm_ppo checkpoint" in err and not (tmp_path / "x.pt").exists()


def test_an_old_generator_checkpoint_migrates_and_samples_the_same_paths(tmp_path, capsys):
    gen_path = tmp_path / "wgan_gp.pt"
    _fit(_data(_bars_file(tmp_path / "A.csv")), "wgan_gp", gen_path)
    state = torch.load(gen_path, weights_only=True)
    assert state["format"] == "clstm_ppo-scenarios-v2"
    # as written before: the transform's arrays as numpy arrays, the v1 marker
    state["transform"] = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in state["transform"].items()}
    old = tmp_path / "old.pt"
    torch.save({**state, "format": "clstm_ppo-scenarios-v1"}, old)
    out = tmp_path / "paths.csv"
    err = one_line_error(capsys, scenarios_main, ["sample", "--checkpoint", str(old), "--paths", "2", "--out",
                                                  str(out)])
    assert "scenario checkpoint" in err and "holds numpy arrays" in err and "clstm_ppo.migrate" in err
    assert not out.exists()
    new = tmp_path / "new.pt"
    assert migrate_main([str(old), str(new), "--trust"]) == 0
    assert "scenario checkpoint, version 1" in capsys.readouterr().out
    frames = [load_generator(p).sample_frame(paths=3, length=20, seed=4) for p in (gen_path, new)]
    assert frames[0].equals(frames[1])
    assert scenarios_main(["sample", "--checkpoint", str(new), "--paths", "2", "--length", "10",
                           "--out", str(out)]) == 0 and out.is_file()


def test_the_migrate_command_says_what_it_does(capsys):
    from conftest import answers_help

    text = answers_help(["-m", "clstm_ppo.migrate"], capsys)
    assert "--trust" in text and "can run code" in text and "What is safe to load" in text
    assert Path(__file__).resolve().parents[1].joinpath("pyproject.toml").read_text().count(
        'clstm-ppo-migrate = "clstm_ppo.migrate:entry"') == 1
