"""adapt: refuses another feature set in one line; its zero-shot row is evaluate's; it writes its checkpoints."""
from __future__ import annotations

import pytest
import torch
from conftest import strict_loads

from clstm_ppo.cli import run_cli
from clstm_ppo.config import load_config
from clstm_ppo.run_files.run_state import load_checkpoint, save_checkpoint

SMALL = ["train.num_envs=4", "ppo.num_steps=8", "ppo.num_minibatches=1", "ppo.update_epochs=1", "train.eval_every=1"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """An untrained smoke-sized agent's checkpoint, as the trainer writes it (no training: fast)."""
    from clstm_ppo.training.runner import Trainer

    folder = tmp_path_factory.mktemp("adapt")
    cfg = load_config("smoke", [*SMALL, f"output.checkpoint_dir={folder}"])
    trainer = Trainer(cfg, folder / "run", torch.device("cpu"))
    path = folder / "run" / "latest.pt"
    save_checkpoint(trainer.run_state(), path)
    return path


def test_adapt_refuses_another_feature_set_in_one_line(checkpoint, tmp_path, capsys):
    from clstm_ppo.adapt import main

    state = load_checkpoint(checkpoint)
    state.normalizer["names"] = [*state.normalizer["names"][:-1], "put_call_ratio"]
    other = tmp_path / "other.pt"
    save_checkpoint(state, other)
    assert run_cli(main, ["--checkpoint", str(other), "--data", "synthetic", "--steps", "32",
                          "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "put_call_ratio" in err
    assert not (tmp_path / "out").exists()


def test_zero_shot_row_equals_evaluate(checkpoint, tmp_path):
    from clstm_ppo.adapt import main as adapt
    from clstm_ppo.evaluate import main as evaluate

    out, ev = tmp_path / "adapt.json", tmp_path / "eval.json"
    assert adapt(["--checkpoint", str(checkpoint), "--data", "synthetic", "--steps", "32", "--no-scratch",
                  "--device", "cpu", "--out", str(tmp_path / "runs"), "--json", str(out)]) == 0
    assert evaluate(["--checkpoint", str(checkpoint), "--data", "synthetic", "--device", "cpu", "--json", str(ev)]) == 0
    adapted, evaluated = strict_loads(out.read_text()), strict_loads(ev.read_text())
    assert adapted["zero_shot"] == evaluated["policies"]["agent"]
    assert adapted["buy_and_hold"] == evaluated["policies"]["buy_and_hold"]
    assert set(adapted) >= {"adapted", "zero_shot", "buy_and_hold"}
    written = load_checkpoint(tmp_path / "runs" / "adapted" / "latest.pt")
    assert written.global_step >= 32 and written.normalizer == load_checkpoint(checkpoint).normalizer
    assert adapted["adapted"] != adapted["zero_shot"]  # the update changed the agent


def test_the_python_call_returns_what_the_command_writes(checkpoint, tmp_path):
    """adapt_checkpoint from Python: the rows, checkpoints and report of `clstm-ppo-adapt --json`, and an out folder
    that already holds a run is refused before any training."""
    from clstm_ppo.adapt import main as adapt
    from clstm_ppo.config import ConfigError
    from clstm_ppo.tables import strict_json
    from clstm_ppo.training.adaptation import adapt_checkpoint

    out = tmp_path / "adapt.json"
    assert adapt(["--checkpoint", str(checkpoint), "--data", "synthetic", "--steps", "32", "--device", "cpu",
                  "--out", str(tmp_path / "cli"), "--json", str(out)]) == 0
    done = adapt_checkpoint(checkpoint, "synthetic", 32, device="cpu", out=tmp_path / "py")
    assert list(done.results) == ["adapted", "zero_shot", "scratch", "buy_and_hold"]
    assert done.checkpoints["adapted"] == tmp_path / "py" / "adapted" / "latest.pt"
    written, returned = strict_loads(out.read_text()), strict_loads(strict_json(done.report, default=str))
    assert {k: v for k, v in written.items() if k != "checkpoints"} == \
        {k: v for k, v in returned.items() if k != "checkpoints"}  # the same rows, trained from the same seed
    with pytest.raises(ConfigError, match="already holds a run"):
        adapt_checkpoint(checkpoint, "synthetic", 32, device="cpu", out=tmp_path / "py")
