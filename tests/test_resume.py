"""Exact resume: a resumed run equals an uninterrupted one to the bit, across compiled and eager paths, rank
states saved every n updates, checkpoints of older layouts and of GPU runs, and from Python."""
import shutil
from pathlib import Path

import pytest
import torch
from smoke_training import train

from clstm_ppo.config import Config, from_dict
from clstm_ppo.run_files.run_state import load_checkpoint


def final_params(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run_dir / "latest.pt").model


# 32 copies x 32 steps: the rollout uses cached bar codes; compiled: and then one compiled decision per step
# (agent/fused_rollout.py) and the static update; 32 x 16 compiled: too few decisions to cache every bar's code, so
# the eager rollout over the compiled env step (the same env step graph: a cold machine compiles it once). A resume
# must not recompute the observation eagerly: the compiled step summed it in another order, and its last bits parted
# the runs. Minibatches of 8 copies: the compiled update has the shapes of tests/test_distributed.py's.
@pytest.mark.parametrize(("num_envs", "compile", "num_steps"), [(8, "off", 32), (32, "off", 32), (32, "on", 32),
                                                              (32, "on", 16)])
def test_resume_equals_an_uninterrupted_run(tmp_path, num_envs, compile, num_steps, capsys):
    """Compiled (32 copies), the first run is also the check that the trainer's graphs are a fixed set: the rollout
    decision, LSTM 2's recurrence block and the losses compile in its first update, and five more updates (new
    weights, rollouts and minibatch orders) recompile nothing and break no graph, while every weight trains."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    common = ["--set", "ppo.lr_schedule=constant", "--set", "train.eval_every=2", "--set", f"train.num_envs={num_envs}",
              "--set", f"ppo.num_minibatches={num_envs // 8}", "--set", f"launch.compile_loop={compile}",
              "--set", f"ppo.num_steps={num_steps}"]
    batch = num_envs * num_steps
    torch._dynamo.reset()
    counters.clear()
    assert train(tmp_path / "a", "--total-steps", str(6 * batch), *common) == 0
    if compile == "on" and num_steps == 32:
        assert counters["stats"]["unique_graphs"] >= 3
        assert not counters["recompiles"], dict(counters["recompiles"])
        assert not counters["graph_break"], dict(counters["graph_break"])
        assert_every_weight_trained(tmp_path / "a" / "synthetic-smoke" / "latest.pt")
    rollout = "compiled" if compile == "on" and num_steps == 32 else "eager"  # one line says how it ran, once
    compiled = "compiled" if compile == "on" else "eager"
    assert capsys.readouterr().out.count(f"ran as: rollout {rollout}, env step {compiled}, update {compiled}, "
                                         "optimizer step eager, precision fp32\n") == 1
    assert train(tmp_path / "b", "--total-steps", str(3 * batch), *common) == 0
    assert train(tmp_path / "b", "--total-steps", str(6 * batch), "--resume-from", "latest", *common) == 0
    a, b = final_params(tmp_path / "a" / "synthetic-smoke"), final_params(tmp_path / "b" / "synthetic-smoke")
    assert load_checkpoint(tmp_path / "b" / "synthetic-smoke" / "latest.pt").update == 6
    for name in a:
        assert torch.equal(b[name], a[name]), f"{name}: the resumed run differs by {(b[name] - a[name]).abs().max()}"


def assert_every_weight_trained(path: Path) -> None:
    """Every weight of the checkpoint at ``path`` moved from the initial weights its run drew from its seed."""
    from clstm_ppo.agent import ActorCritic
    from clstm_ppo.env import PORTFOLIO_FEATURES, ActionSpace

    state = load_checkpoint(path)
    cfg = from_dict(Config, state.config)
    torch.manual_seed(cfg.seed)  # as the trainer draws its initial weights
    initial = ActorCritic(len(state.normalizer["names"]), len(PORTFOLIO_FEATURES),
                          ActionSpace.from_config(cfg.market).n, cfg.agent).state_dict()
    unchanged = [name for name, value in state.model.items() if torch.equal(value, initial[name])]
    assert not unchanged, f"untrained weights: {unchanged}"


def test_rank_states_saved_every_n_updates_still_resume_the_last_update_exactly(tmp_path, capsys):
    """output.rank_state_every: 2 leaves the env copies out of update 1's checkpoint (a resume from it starts fresh
    episodes and says why), but the run's last latest.pt carries them, so resuming it equals an uninterrupted run."""
    common = ["--set", "ppo.lr_schedule=constant", "--set", "train.eval_every=2", "--set", "train.num_envs=8",
              "--set", "output.checkpoint_every=1", "--set", "output.keep_last=5"]
    batch = 8 * 32
    assert train(tmp_path / "a", "--total-steps", str(6 * batch), *common) == 0
    run_b = tmp_path / "b" / "synthetic-smoke"
    every = ["--set", "output.rank_state_every=2"]
    assert train(tmp_path / "b", "--total-steps", str(3 * batch), *common, *every) == 0
    assert not load_checkpoint(run_b / "update_0000001.pt").ranks
    early = tmp_path / "update_1.pt"
    shutil.copy(run_b / "update_0000001.pt", early)  # keep_last prunes it once the run goes on
    assert load_checkpoint(run_b / "update_0000002.pt").ranks
    assert load_checkpoint(run_b / "latest.pt").update == 3 and load_checkpoint(run_b / "latest.pt").ranks
    assert train(tmp_path / "b", "--total-steps", str(6 * batch), "--resume-from", "latest", *common, *every) == 0
    a, b = final_params(tmp_path / "a" / "synthetic-smoke"), final_params(run_b)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-6, atol=1e-7, msg=name)
    capsys.readouterr()
    assert train(tmp_path / "b", "--total-steps", str(2 * batch), "--resume-from", str(early), *common,
                 *every) == 0
    assert "env copies start fresh episodes (the checkpoint was written between output.rank_state_every's saves)" \
        in capsys.readouterr().out


def test_resuming_a_run_that_finished_its_budget_says_how_to_continue(tmp_path, capsys):
    # Unstaggered, all 8 copies' first 64-bar episodes end within the 64 steps, so --num-episodes 1 is spent too.
    args = ["--set", "train.num_envs=8", "--set", "train.eval_every=2", "--set", "env.stagger_starts=false"]
    assert train(tmp_path, "--total-steps", "512", *args) == 0
    run = tmp_path / "synthetic-smoke"
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    started = capsys.readouterr().out  # the run describes itself before training
    assert f"run synthetic-smoke -> {run}" in started and "data synthetic: SYN0" in started
    assert "1 worker(s) on cpu" in started and "8 env copies x 32 steps each = 256 env steps per update; " \
        "budget 512 env steps (~2 updates)" in started
    assert "parameters; fp32; learning rate 0.001 linear" in started
    assert train(tmp_path, "--resume-from", "latest", "--total-steps", "512", *args) == 2
    assert capsys.readouterr().err.strip() == (
        "error: the checkpoint already holds 512 env steps, the budget of train.total_steps (512); "
        "pass a larger --total-steps to train on")
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before, "a refused resume touches nothing"
    assert train(tmp_path, "--resume-from", "latest", "--num-episodes", "1", *args) == 2
    assert "pass a larger --num-episodes" in capsys.readouterr().err


@pytest.mark.parametrize("written_by", ["an older layout", "an older random stream"])
def test_resume_from_a_checkpoint_whose_env_state_does_not_fit_restarts_the_copies(tmp_path, capsys, written_by):
    """Checkpoints written before the env's slot-major layout, or before its random stream became counters in
    the state (they saved a torch.Generator's state instead), still resume here: the copies start afresh."""
    from clstm_ppo.run_files.run_state import save_checkpoint

    args = ["--set", "train.num_envs=8", "--set", "train.eval_every=2"]
    assert train(tmp_path, "--total-steps", "512", *args) == 0
    latest = tmp_path / "synthetic-smoke" / "latest.pt"
    state = load_checkpoint(latest)
    env = state.ranks[0].env
    if written_by == "an older layout":
        for name in ("active", "is_call", "strike", "expiry_time", "contracts", "entry_cost", "mark"):
            env[name] = env[name].T.contiguous()  # the older (N, P) layout
    else:
        del env["key"], env["draws"]
        env["generator"] = torch.zeros(5056, dtype=torch.uint8)  # what a CPU torch.Generator saved
    save_checkpoint(state, latest)
    assert train(tmp_path, "--total-steps", "1024", "--resume-from", "latest", *args) == 0
    assert "env copies start fresh episodes (the saved env state has another layout)" in capsys.readouterr().out
    resumed = load_checkpoint(latest)
    assert resumed.update == 4 and resumed.ranks[0].env["active"].shape == (5, 8)


def test_a_run_trained_on_gpus_resumes_on_a_machine_without_one(tmp_path, capsys):
    """Where a run executes is chosen per launch: a checkpoint's saved device and threads are not reused, nor its
    Adam's device settings (a run whose optimizer step was a CUDA graph saved a capturable Adam with a tensor rate,
    which cannot step on a CPU): it continues as the same checkpoint written by a CPU run does."""
    from clstm_ppo.run_files.run_state import save_checkpoint

    args = ["--set", "train.num_envs=8", "--set", "train.eval_every=2"]
    assert train(tmp_path, "--total-steps", "512", *args) == 0
    latest = tmp_path / "synthetic-smoke" / "latest.pt"
    shutil.copytree(tmp_path / "synthetic-smoke", tmp_path / "cpu" / "synthetic-smoke")
    state = load_checkpoint(latest)
    assert state.config["launch"]["device"] == "auto", "the resolved device must not be written as the user's choice"
    state.config["launch"].update(device="cuda", threads_per_worker=8)  # as written on a GPU machine
    for group in state.optimizer["param_groups"]:  # by make_adam(..., capture_on=cuda), loaded to the CPU
        group.update(capturable=True, foreach=True, lr=torch.tensor(group["lr"]))
    save_checkpoint(state, latest)
    assert train(tmp_path, "--total-steps", "1024", "--resume-from", "latest", *args) == 0
    assert train(tmp_path / "cpu", "--total-steps", "1024", "--resume-from", "latest", *args) == 0
    assert load_checkpoint(latest).update == 4
    cpu_written = final_params(tmp_path / "cpu" / "synthetic-smoke")
    for name, value in final_params(tmp_path / "synthetic-smoke").items():
        assert torch.equal(value, cpu_written[name]), name
    assert train(tmp_path, "--total-steps", "1536", "--resume-from", "latest", "--device", "cuda", *args) == 2
    assert "--device cuda was asked for" in capsys.readouterr().err  # asked for in this command: still an error


def test_a_run_trains_and_resumes_from_python(tmp_path):
    """train_run is what `python -m clstm_ppo.train` calls: it returns the run folder, resumes from a named
    checkpoint with the run's own settings, and a bad setting is the command's one-line ConfigError."""
    from clstm_ppo.config import ConfigError
    from clstm_ppo.training.launch import train_run

    common = [f"output.checkpoint_dir={tmp_path}", "output.run_name=lib", "train.num_envs=8", "ppo.num_steps=16"]
    run = train_run("smoke", [*common, "train.total_steps=256"])
    assert run == tmp_path / "lib" and load_checkpoint(run / "latest.pt").update == 2
    assert train_run("smoke", [*common, "train.total_steps=512"], resume_from="latest") == run
    assert load_checkpoint(run / "latest.pt").update == 4
    with pytest.raises(ConfigError, match="ppo.no_such_key"):
        train_run("smoke", ["ppo.no_such_key=1"])
    with pytest.raises(ConfigError, match="contradict"):
        train_run("smoke", common, resume_from="latest", fresh_start=True)
