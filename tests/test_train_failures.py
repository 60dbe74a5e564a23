"""What a training run says and keeps when something goes wrong: a run folder in use or already there, the GPU
out of memory, a slow disk, wandb without a login, a diverging loss, no C++ compiler, an unwritable TensorBoard
folder. One line each, and no lost or damaged files."""
import os
import subprocess
import sys

import pytest
import torch
from conftest import strict_loads
from smoke_training import SMOKE, train

from clstm_ppo.run_files.run_state import load_checkpoint


def test_a_run_folder_in_use_by_another_training_process_is_refused(tmp_path, capsys):
    from clstm_ppo.run_files.checkpoint import run_lock

    args = ["--total-steps", "512", "--set", "train.num_envs=8"]
    assert train(tmp_path, *args) == 0
    run = tmp_path / "synthetic-smoke"
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    capsys.readouterr()
    with run_lock(run):  # as if a first resume were still training there
        for extra in (["--resume-from", "latest", "--total-steps", "1024"], ["--fresh-start"]):
            assert train(tmp_path, *args[2:], *extra) == 2
            err = capsys.readouterr().err.strip()
            assert err.startswith(f"error: {run} is in use by a training process (pid ") and "--run-name" in err
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir() if p.name != ".lock"} == \
        {k: v for k, v in before.items() if k != ".lock"}, "a refused launch touches nothing"
    assert not list(tmp_path.glob("synthetic-smoke.old-*")), "--fresh-start must not move a run in use"
    assert train(tmp_path, *args[2:], "--resume-from", "latest", "--total-steps", "1024") == 0  # free again


def test_existing_run_is_protected_and_fresh_start_moves_it_aside(tmp_path, capsys):
    args = ["--total-steps", "512", "--set", "train.num_envs=8"]
    assert train(tmp_path, *args) == 0
    capsys.readouterr()
    assert train(tmp_path, *args) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "--resume-from latest" in err and "--fresh-start" in err
    assert train(tmp_path, *args, "--fresh-start") == 0
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert folders[0] == "synthetic-smoke" and folders[1].startswith("synthetic-smoke.old-")
    assert (tmp_path / folders[1] / "latest.pt").is_file()


@pytest.mark.parametrize("update_graphs", [False, True])
def test_running_out_of_gpu_memory_says_how_to_split_the_minibatches(tmp_path, monkeypatch, capsys, update_graphs):
    """At 65,536 copies a GPU the update's activations are what runs out (docs/TRAINING.md, "Memory at scale"):
    the one line says what was saved and which settings keep the same optimizer steps in less memory (with
    launch.update_graphs, which refuses gradient accumulation, turning it off)."""
    from clstm_ppo.config import load_config
    from clstm_ppo.training import update_phase

    real, calls = update_phase.ppo_update, []

    def second_update_runs_out(*args, **kwargs):  # what CUDA raises where an allocation does not fit
        calls.append(1)
        if len(calls) == 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real(*args, **kwargs)

    monkeypatch.setattr(update_phase, "ppo_update", second_update_runs_out)
    ran = ["train.num_envs=8", *(["launch.update_graphs=true"] if update_graphs else [])]
    assert train(tmp_path, "--total-steps", "5120", *(a for s in ran for a in ("--set", s))) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    graphs_off = "--set launch.update_graphs=false " if update_graphs else ""
    assert err == ("error: CUDA ran out of memory on rank 0; latest.pt holds update 1; split each minibatch with "
                   f"{graphs_off}--set ppo.num_minibatches=8 --set ppo.grad_accumulation=4 (the same optimizer "
                   "steps; about 1/4 of the update's activations), or lower --num-envs or the agent.* sizes")
    assert load_checkpoint(tmp_path / "synthetic-smoke" / "latest.pt").update == 1
    words = err.split()
    suggested = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
    cfg = load_config(SMOKE, [*ran, *suggested])  # the settings it names are accepted on top of the run's
    assert (cfg.ppo.num_minibatches, cfg.ppo.grad_accumulation, cfg.launch.update_graphs) == (8, 4, False)


@pytest.mark.parametrize("every", [1, 2])
def test_a_checkpoint_that_outweighs_the_update_is_said_once_with_the_setting_that_lightens_it(tmp_path, monkeypatch,
                                                                                                capsys, every):
    """At 65,536 copies on several GPUs, gathering and writing every rank's state can cost a good part of an
    update (docs/BENCHMARKS.md): the run says so once, naming output.rank_state_every, unless it is already set."""
    import time

    from clstm_ppo.run_files import checkpoint

    real = checkpoint.atomic_save

    def slow_disk(state, path):  # a checkpoint far slower than the smoke config's update
        time.sleep(1.0)
        real(state, path)

    monkeypatch.setattr(checkpoint, "atomic_save", slow_disk)
    args = ["--total-steps", "1024", "--set", "train.num_envs=8", "--set", f"output.rank_state_every={every}"]
    assert train(tmp_path, *args) == 0  # 4 updates of 8 copies x 32 steps
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("each checkpoint takes ")]
    assert len(notes) == (1 if every == 1 else 0)
    if notes:
        assert "--set output.rank_state_every=10 carries them every 10th update only" in notes[0]
    records = (tmp_path / "synthetic-smoke" / "metrics.jsonl").read_text().splitlines()
    saves = [r for r in map(strict_loads, records) if r["kind"] == "checkpoint"]
    assert len(saves) == 4 and all(r["save_s"] >= 1.0 for r in saves)
    assert [r["rank_states"] for r in saves] == [every == 1 or r["update"] % every == 0 for r in saves]


def test_wandb_without_a_login_is_one_line_before_training(tmp_path):

    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    env.update(HOME=str(tmp_path / "home"), WANDB_CONFIG_DIR=str(tmp_path / "home" / ".wandb"))  # no netrc, no login
    # Its own process: wandb keeps settings from earlier runs in the test process.
    result = subprocess.run([sys.executable, "-m", "clstm_ppo.train", "--config", SMOKE, "--checkpoint-dir",
                             str(tmp_path), "--wandb", "--total-steps", "512"], capture_output=True, text=True,
                            timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("error: --wandb could not start a W&B run") and result.stderr.count("\n") == 1
    assert "WANDB_MODE=offline" in result.stderr and "Episode" not in result.stdout + result.stderr
    assert not list((tmp_path / "synthetic-smoke").glob("*.pt"))


def test_a_diverging_loss_stops_the_run_without_saving_broken_weights(tmp_path, capsys):
    code = train(tmp_path, "--total-steps", "5120", "--set", "train.num_envs=8", "--set", "ppo.learning_rate=1e30")
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and err.startswith("error: the loss became NaN or infinite in update ")
    assert "lower ppo.learning_rate" in err
    failed_update = int(err.split("in update ")[1].split(";")[0])
    latest = tmp_path / "synthetic-smoke" / "latest.pt"
    if failed_update == 1:
        assert "no checkpoint was written" in err and not latest.exists()
    else:  # what was saved before the failure is the last sound update, with finite weights
        state = load_checkpoint(latest)
        assert state.update == failed_update - 1 and f"latest.pt holds update {failed_update - 1}" in err
        assert all(torch.isfinite(v).all() for v in state.model.values())


def test_compile_without_a_cpp_compiler_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no compiler to be found
    monkeypatch.delenv("CXX", raising=False)
    assert train(tmp_path, "--total-steps", "512", "--set", "launch.compile_encoder=true") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: launch.compile_encoder on a CPU needs a C++ compiler")
    assert not (tmp_path / "synthetic-smoke").exists(), "refused before the run folder was made"


def test_an_unwritable_tensorboard_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("a file, not a folder")
    assert train(tmp_path, "--total-steps", "512", "--tensorboard", str(tmp_path / "file" / "board")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --tensorboard") and err.count("\n") == 1
