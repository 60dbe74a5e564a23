"""The trainer end to end on the smoke config: learning, best checkpoints, exact resume, bad input."""
import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import strict_loads

from clstm_ppo.agent.from_checkpoint import model_from_checkpoint
from clstm_ppo.backtest.policies import agent_policy, random_policy
from clstm_ppo.backtest.walk import selection_metrics, walk, walk_together
from clstm_ppo.cli import run_cli
from clstm_ppo.config import Config, from_dict
from clstm_ppo.data import Normalizer
from clstm_ppo.market.observed import observed_market_data
from clstm_ppo.metrics import BEST_METRICS, COST_FIELDS
from clstm_ppo.tables import strict_json
from clstm_ppo.train import main as train_main
from clstm_ppo.training.checkpoint import load_checkpoint

SMOKE = "smoke"


def train(tmp: Path, *extra: str) -> int:
    return run_cli(train_main, ["--config", SMOKE, "--checkpoint-dir", str(tmp), *extra])


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    assert train(root) == 0
    return root / "synthetic-smoke"


def test_trained_agent_beats_a_random_policy_on_validation(smoke_run):
    state = load_checkpoint(smoke_run / "latest.pt")
    cfg = from_dict(Config, state["config"])
    data = observed_market_data(cfg, Normalizer.from_state_dict(state["normalizer"]))
    model = model_from_checkpoint(state, data, cfg, torch.device("cpu")).eval()
    cpu = torch.device("cpu")
    agent = selection_metrics(walk("agent", *agent_policy(model, 1, cpu), data, "validation", cfg, cpu))
    walks = walk_together({f"random {seed}": random_policy(seed) for seed in range(8)}, data, "validation", cfg, cpu)
    randoms = [selection_metrics(result) for result in walks.values()]
    # Seeded: the agent's validation walk returned +74,076% (Sharpe 5.7) against +36% to +493% (Sharpe 1.4 to
    # 3.9) for eight random seeds. The smoke market's options are priced at the regime's vol x a premium, blind
    # to the planted trend, so even random buying often wins there: the agent's edge is in how much it makes.
    assert agent["return_pct"] > 5 * max(r["return_pct"] for r in randoms)
    assert agent["sharpe"] > max(r["sharpe"] for r in randoms)


def test_run_folder_holds_best_checkpoints_metrics_and_config(smoke_run, capsys):
    for name in BEST_METRICS:
        state = load_checkpoint(smoke_run / f"best_{name}.pt")
        # composite_smoothed is null (no number) until its window of walks is full
        assert state["best"][name] == pytest.approx(max(r[name] for r in evaluations(smoke_run)
                                                        if r["step"] <= state["global_step"] and r[name] is not None))
    assert len(list(smoke_run.glob("update_*.pt"))) <= 3
    assert (smoke_run / "config.yaml").is_file()
    records = [strict_loads(line) for line in (smoke_run / "metrics.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in records} >= {"update", "eval", "train_episodes"}
    for record in (r for r in records if r["kind"] in ("eval", "train_episodes")):  # costs by kind, both logs
        kinds = [record[k] for k in COST_FIELDS]
        assert min(kinds) >= 0 and record["costs"] == pytest.approx(sum(kinds))
    assert any(r["kind"] == "train_episodes" and r["cost_commission"] > 0 for r in records)
    size_mb = (smoke_run / "latest.pt").stat().st_size / 1e6
    assert size_mb < 2.0, f"checkpoint is {size_mb:.1f} MB"
    # What each update's checkpoint cost, one record an update: gathered, written, and latest.pt's size
    saves = [r for r in records if r["kind"] == "checkpoint"]
    assert [r["update"] for r in saves] == [r["update"] for r in records if r["kind"] == "update"]
    assert all(r["gather_s"] >= 0 and r["save_s"] > 0 and r["rank_states"] for r in saves)
    assert saves[-1]["latest_mb"] == pytest.approx(size_mb)


def evaluations(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(strict_loads, lines) if r["kind"] == "eval"]


def final_params(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run_dir / "latest.pt")["model"]


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
              "--set", f"ppo.num_minibatches={num_envs // 8}", "--set", f"env.compile={compile}",
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
    assert load_checkpoint(tmp_path / "b" / "synthetic-smoke" / "latest.pt")["update"] == 6
    for name in a:
        assert torch.equal(b[name], a[name]), f"{name}: the resumed run differs by {(b[name] - a[name]).abs().max()}"


def assert_every_weight_trained(path: Path) -> None:
    """Every weight of the checkpoint at ``path`` moved from the initial weights its run drew from its seed."""
    from clstm_ppo.agent import CascadedActorCritic
    from clstm_ppo.env import PORTFOLIO_FEATURES, ActionSpace

    state = load_checkpoint(path)
    cfg = from_dict(Config, state["config"])
    torch.manual_seed(cfg.seed)  # as the trainer draws its initial weights
    initial = CascadedActorCritic(len(state["normalizer"]["names"]), len(PORTFOLIO_FEATURES),
                                  ActionSpace.from_config(cfg.market).n, cfg.agent).state_dict()
    unchanged = [name for name, value in state["model"].items() if torch.equal(value, initial[name])]
    assert not unchanged, f"untrained weights: {unchanged}"


def test_rank_states_saved_every_n_updates_still_resume_the_last_update_exactly(tmp_path, capsys):
    """train.rank_state_every: 2 leaves the env copies out of update 1's checkpoint (a resume from it starts fresh
    episodes and says why), but the run's last latest.pt carries them, so resuming it equals an uninterrupted run."""
    common = ["--set", "ppo.lr_schedule=constant", "--set", "train.eval_every=2", "--set", "train.num_envs=8",
              "--set", "train.checkpoint_every=1", "--set", "train.keep_last=5"]
    batch = 8 * 32
    assert train(tmp_path / "a", "--total-steps", str(6 * batch), *common) == 0
    run_b = tmp_path / "b" / "synthetic-smoke"
    every = ["--set", "train.rank_state_every=2"]
    assert train(tmp_path / "b", "--total-steps", str(3 * batch), *common, *every) == 0
    assert "env" not in load_checkpoint(run_b / "update_0000001.pt")
    early = tmp_path / "update_1.pt"
    shutil.copy(run_b / "update_0000001.pt", early)  # keep_last prunes it once the run goes on
    assert "env" in load_checkpoint(run_b / "update_0000002.pt")
    assert load_checkpoint(run_b / "latest.pt")["update"] == 3 and "env" in load_checkpoint(run_b / "latest.pt")
    assert train(tmp_path / "b", "--total-steps", str(6 * batch), "--resume-from", "latest", *common, *every) == 0
    a, b = final_params(tmp_path / "a" / "synthetic-smoke"), final_params(run_b)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-6, atol=1e-7, msg=name)
    capsys.readouterr()
    assert train(tmp_path / "b", "--total-steps", str(2 * batch), "--resume-from", str(early), *common,
                 *every) == 0
    assert "env copies start fresh episodes (the checkpoint was written between train.rank_state_every's saves)" \
        in capsys.readouterr().out


def test_a_run_folder_in_use_by_another_training_process_is_refused(tmp_path, capsys):
    from clstm_ppo.training.checkpoint import run_lock

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


def test_bad_checkpoints_and_resume_choices_get_clear_errors(tmp_path, smoke_run, capsys):
    truncated = tmp_path / "cut.pt"
    truncated.write_bytes((smoke_run / "latest.pt").read_bytes()[:5000])
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {}}, foreign)
    for path, expected in ((truncated, "is truncated or corrupt"), (foreign, "is not a clstm_ppo checkpoint")):
        assert train(tmp_path, "--resume-from", str(path)) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and expected in err and "\n" not in err
    assert train(tmp_path, "--resume-from", "bestest") == 2
    err = capsys.readouterr().err
    assert "composite, composite_smoothed, win_rate, profit_rate, sharpe, latest" in err
    assert train(tmp_path, "--set", "ppo.lr_schedule=cosine") == 2
    assert "linear, constant" in capsys.readouterr().err


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


def test_pretraining_learns_next_bar_returns(tmp_path, capsys):
    assert train(tmp_path, "--pretraining", "--total_steps", "512", "--set", "train.num_envs=8",
                 "--set", "train.pretrain_epochs=4") == 0
    captured = capsys.readouterr()
    assert "pretraining LSTM 1" in captured.out + captured.err and "epoch 4: mse" in captured.out + captured.err
    rows = (tmp_path / "synthetic-smoke" / "pretrain_loss.csv").read_text().splitlines()[1:]
    mse = [float(r.split(",")[1]) for r in rows]
    baseline = float(rows[0].split(",")[2])
    assert len(mse) == 4 and mse[-1] < mse[0] and mse[-1] < baseline


def test_command_line_entry_point_and_underscore_aliases(tmp_path):
    """The installed command, run from a folder outside the repository, trains a named config."""
    command = Path(sys.executable).parent / "clstm-ppo-train"
    proc = subprocess.run([str(command), "--config", "smoke", "--checkpoint_dir", str(tmp_path / "runs"),
                           "--num_episodes", "20", "--run_name", "alias", "--set", "train.num_envs=8"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Episode " in proc.stderr + proc.stdout and "resume with:" in proc.stdout
    state = load_checkpoint(tmp_path / "runs" / "alias" / "latest.pt")
    assert state["episodes"] >= 20 and state["config"]["train"]["num_envs"] == 8
    assert not (tmp_path / "checkpoints").exists()


def test_wandb_flag_logs_an_offline_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert train(tmp_path, "--wandb", "--total-steps", "512", "--set", "train.num_envs=8") == 0
    run = tmp_path / "synthetic-smoke"
    runs = list((run / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].rglob("*.wandb")), "wandb should have recorded the run offline"
    run_id = (run / "wandb_run_id").read_text()
    assert runs[0].name.endswith(run_id)
    assert train(tmp_path, "--wandb", "--total-steps", "1024", "--resume-from", "latest") == 0
    runs = sorted((run / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(r.name.endswith(run_id) for r in runs), "a resume logs into the same W&B run"


@pytest.mark.parametrize("update_graphs", [False, True])
def test_running_out_of_gpu_memory_says_how_to_split_the_minibatches(tmp_path, monkeypatch, capsys, update_graphs):
    """At 65,536 copies a GPU the update's activations are what runs out (docs/TRAINING.md, "Memory at scale"):
    the one line says what was saved and which settings keep the same optimizer steps in less memory (with
    train.update_graphs, which refuses gradient accumulation, turning it off)."""
    from clstm_ppo.config import load_config
    from clstm_ppo.training import runner

    real, calls = runner.ppo_update, []

    def second_update_runs_out(*args, **kwargs):  # what CUDA raises where an allocation does not fit
        calls.append(1)
        if len(calls) == 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "ppo_update", second_update_runs_out)
    ran = ["train.num_envs=8", *(["train.update_graphs=true"] if update_graphs else [])]
    assert train(tmp_path, "--total-steps", "5120", *(a for s in ran for a in ("--set", s))) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    graphs_off = "--set train.update_graphs=false " if update_graphs else ""
    assert err == ("error: CUDA ran out of memory on rank 0; latest.pt holds update 1; split each minibatch with "
                   f"{graphs_off}--set ppo.num_minibatches=8 --set ppo.grad_accumulation=4 (the same optimizer "
                   "steps; about 1/4 of the update's activations), or lower --num-envs or the agent.* sizes")
    assert load_checkpoint(tmp_path / "synthetic-smoke" / "latest.pt")["update"] == 1
    words = err.split()
    suggested = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
    cfg = load_config(SMOKE, [*ran, *suggested])  # the settings it names are accepted on top of the run's
    assert (cfg.ppo.num_minibatches, cfg.ppo.grad_accumulation, cfg.train.update_graphs) == (8, 4, False)


@pytest.mark.parametrize("every", [1, 2])
def test_a_checkpoint_that_outweighs_the_update_is_said_once_with_the_setting_that_lightens_it(tmp_path, monkeypatch,
                                                                                                capsys, every):
    """At 65,536 copies on several GPUs, gathering and writing every rank's state can cost a good part of an
    update (docs/BENCHMARKS.md): the run says so once, naming train.rank_state_every, unless it is already set."""
    import time

    from clstm_ppo.training import checkpoint

    real = checkpoint.atomic_save

    def slow_disk(state, path):  # a checkpoint far slower than the smoke config's update
        time.sleep(1.0)
        real(state, path)

    monkeypatch.setattr(checkpoint, "atomic_save", slow_disk)
    args = ["--total-steps", "1024", "--set", "train.num_envs=8", "--set", f"train.rank_state_every={every}"]
    assert train(tmp_path, *args) == 0  # 4 updates of 8 copies x 32 steps
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("each checkpoint takes ")]
    assert len(notes) == (1 if every == 1 else 0)
    if notes:
        assert "--set train.rank_state_every=10 carries them every 10th update only" in notes[0]
    records = (tmp_path / "synthetic-smoke" / "metrics.jsonl").read_text().splitlines()
    saves = [r for r in map(strict_loads, records) if r["kind"] == "checkpoint"]
    assert len(saves) == 4 and all(r["save_s"] >= 1.0 for r in saves)
    assert [r["rank_states"] for r in saves] == [every == 1 or r["update"] % every == 0 for r in saves]


def test_wandb_without_a_login_is_one_line_before_training(tmp_path):
    import os

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
        assert state["update"] == failed_update - 1 and f"latest.pt holds update {failed_update - 1}" in err
        assert all(torch.isfinite(v).all() for v in state["model"].values())


def test_evaluate_command_walks_the_agent_and_every_benchmark(smoke_run, tmp_path):
    plot, report, returns = tmp_path / "equity.png", tmp_path / "report.json", tmp_path / "returns.csv"
    result = subprocess.run([sys.executable, "-m", "clstm_ppo.evaluate", "--checkpoint",
                             str(smoke_run / "best_composite.pt"), "--plot", str(plot), "--json", str(report),
                             "--returns", str(returns)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("test split walked ")
    assert lines[1].startswith("best_rule: ") and "fixed rules on validation" in lines[1]
    policies = ["agent", "buy_and_hold", "putwrite", "buywrite", "cash", "random", "macd_rule", "long_straddle",
                "best_rule"]
    header = next(i for i, line in enumerate(lines) if line.startswith("policy"))
    rows = lines[header + 1:header + 1 + len(policies)]
    assert [line.split()[0] for line in rows] == policies
    assert all(len(line.split()) == len(lines[header].split()) for line in rows), \
        "columns must not run together"
    assert plot.stat().st_size > 10_000
    saved = strict_loads(report.read_text())
    assert list(saved["policies"]) == policies
    picked = saved["best_rule"]  # which fixed rule, picked where, and its rivals
    assert picked["rule"] in lines[1] and picked["on"].startswith("validation ")
    assert picked["best"][0]["rule"] == picked["rule"]
    agent = saved["policies"]["agent"]["SYN0"]
    assert saved["policies"]["cash"]["SYN0"]["trades"] == 0.0 and saved["policies"]["cash"]["SYN0"]["costs"] == 0
    assert agent["costs"] == pytest.approx(sum(agent[f"cost_{k}"] for k in ("spread", "slippage", "commission",
                                                                            "occ_clearing", "finra_taf", "sec_fee",
                                                                            "orf", "shares")))
    import numpy as np
    import pandas as pd
    daily = pd.read_csv(returns, index_col="date", parse_dates=True)
    assert list(daily.columns) == policies
    r = daily["agent"].to_numpy()  # the reported numbers are those of the written returns
    assert agent["sharpe"] == pytest.approx(np.sqrt(252) * r.mean() / r.std(ddof=1), rel=1e-9)
    assert agent["total_return"] == pytest.approx(np.prod(1 + r) - 1, rel=1e-9)
    bad = subprocess.run([sys.executable, "-m", "clstm_ppo.evaluate", "--checkpoint", str(tmp_path / "none.pt")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: checkpoint") and "not found" in bad.stderr


@pytest.mark.parametrize(("flags", "expected"), [
    (["--plot", "{tmp}/curves.txt"], "matplotlib cannot write '.txt' files; end the name in one of"),
    (["--plot", "{tmp}/a_file/curves.png"], "cannot make its folder"),
    (["--returns", "{tmp}/daily.txt"], "--returns {tmp}/daily.txt: end the name in .csv"),
    (["--tearsheet", "{tmp}/sheet.pdf"], "end the name in .html"),
    (["--set", "data.window=5"], "was trained on 10-bar windows, not 5"),
    (["--set", "market.moneyness=[0.9,1.0]"], "was trained on the chain [0.95, 1.0, 1.05]"),
    (["--set", "agent.lstm2_hidden=8"], "agent sizes come from the checkpoint"),
    (["--set", "train.eval_episodes=4"], "'train.eval_episodes' was removed"),
])
def test_evaluate_refuses_bad_flags_before_evaluating(smoke_run, tmp_path, capsys, flags, expected):
    from clstm_ppo.evaluate import main as evaluate_main

    (tmp_path / "a_file").write_text("a file where the plot's folder should be")
    flags = [f.format(tmp=tmp_path) for f in flags]
    assert run_cli(evaluate_main, ["--checkpoint", str(smoke_run / "latest.pt"), *flags]) == 2
    out = capsys.readouterr()
    assert out.err.startswith("error: ") and expected.format(tmp=tmp_path) in out.err and out.err.count("\n") == 1
    assert out.out == "", "nothing is evaluated before the flags are known to be usable"


def test_evaluate_makes_the_plot_folder_and_reports_several_checkpoints(smoke_run, tmp_path, capsys):
    from clstm_ppo.evaluate import main as evaluate_main

    plot, report = tmp_path / "new" / "folder" / "curves.pdf", tmp_path / "r.json"
    assert run_cli(evaluate_main, ["--checkpoint", str(smoke_run / "latest.pt"), str(smoke_run / "best_sharpe.pt"),
                                   "--split", "validation", "--plot", str(plot), "--json", str(report)]) == 0
    assert plot.read_bytes().startswith(b"%PDF")
    saved = strict_loads(report.read_text())
    assert list(saved["policies"])[:2] == ["agent_1", "agent_2"]
    across = saved["across_checkpoints"]["SYN0"]["total_return"]
    values = [saved["policies"][name]["SYN0"]["total_return"] for name in ("agent_1", "agent_2")]
    assert across["values"] == values and across["mean"] == pytest.approx(sum(values) / 2)
    assert "agent across checkpoints (mean +- std):" in capsys.readouterr().out
    # the same backtest from Python returns what --json wrote
    from clstm_ppo.backtest.checkpoints import backtest_checkpoints

    done = backtest_checkpoints([smoke_run / "latest.pt", smoke_run / "best_sharpe.pt"], split="validation")
    assert strict_loads(strict_json(done.report, default=str)) == saved
    assert done.rule is not None and saved["best_rule"] == done.rule.as_dict()


def test_evaluate_on_another_file_normalises_with_the_checkpoints_statistics(smoke_run, tmp_path, capsys):
    from conftest import make_bars

    from clstm_ppo.evaluate import main as evaluate_main

    make_bars(700, seed=3).to_csv(tmp_path / "other.csv", index=False)
    assert run_cli(evaluate_main, ["--checkpoint", str(smoke_run / "latest.pt"), "--data",
                                   str(tmp_path / "other.csv")]) == 0
    assert "data " + str(tmp_path / "other.csv") in capsys.readouterr().out
    state = load_checkpoint(smoke_run / "latest.pt")
    state["normalizer"]["names"] = list(state["normalizer"]["names"])[:-1]  # a checkpoint of another feature set
    torch.save(state, tmp_path / "other_features.pt")
    assert run_cli(evaluate_main, ["--checkpoint", str(tmp_path / "other_features.pt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: saved normalisation covers features") and err.count("\n") == 1


def test_early_stopping_ends_the_run_after_patience_evaluations(tmp_path, capsys):
    assert train(tmp_path, "--total-steps", str(40 * 256), "--set", "train.num_envs=8", "--eval-every", "1",
                 "--early-stopping-patience", "1") == 0
    out = capsys.readouterr().out
    assert "early stop: 1 evaluations without a new best composite" in out
    state = load_checkpoint(tmp_path / "synthetic-smoke" / "latest.pt")
    assert state["update"] < 40 and state["evals_without_best"] == 1


def test_bf16_training_runs_and_fp16_on_cpu_is_refused(tmp_path, capsys):
    """bf16 trains on any CPU: with oneDNN's bf16 LSTMs where the CPU has them, else with the LSTMs in float32,
    and the run's "ran as" line says which, once."""
    from clstm_ppo.agent.precision import cpu_runs_bf16_lstm

    assert train(tmp_path, "--total-steps", "1024", "--set", "train.num_envs=8", "--set", "train.precision=bf16",
                 "--set", "ppo.grad_accumulation=2") == 0
    said = "precision bf16\n" if cpu_runs_bf16_lstm() else "precision bf16 (LSTMs in fp32: no bf16 LSTM on this CPU)\n"
    assert capsys.readouterr().out.count(said) == 1
    state = load_checkpoint(tmp_path / "synthetic-smoke" / "latest.pt")
    assert state["config"]["train"]["precision"] == "bf16" and state["update"] == 4
    assert all(torch.isfinite(v).all() and v.dtype == torch.float32 for v in state["model"].values())
    capsys.readouterr()
    assert train(tmp_path / "x", "--set", "train.precision=fp16") == 2
    assert capsys.readouterr().err.strip() == ("error: train.precision fp16 needs a CUDA device; "
                                               "on the CPU use bf16 or fp32")
    assert train(tmp_path / "y", "--set", "ppo.grad_accumulation=3") == 2
    assert "must divide ppo.num_minibatches" in capsys.readouterr().err


def test_update_records_carry_resource_statistics(smoke_run):
    updates = [strict_loads(line) for line in (smoke_run / "metrics.jsonl").read_text().splitlines()
               if '"kind": "update"' in line]
    assert updates and all(r["max_rss_mb"] > 50 and 0 < r["cpu_util_pct"] < 100 * 64 for r in updates)
    assert not any(k.startswith("gpu_") for k in updates[0]), "no GPU here, so no GPU statistics"
    # Where each update's time went: rollout and PPO update, which together fit between two records.
    assert all(r["rollout_s"] > 0 and r["update_s"] > 0 for r in updates)
    for before, after in itertools.pairwise(updates):
        assert after["rollout_s"] + after["update_s"] <= after["time"] - before["time"] + 1e-3


def test_compiled_encoder_trains_and_keeps_checkpoint_keys(tmp_path, smoke_run):
    assert train(tmp_path, "--total-steps", "1024", "--set", "train.num_envs=8", "--set", "train.compile=true") == 0
    compiled = load_checkpoint(tmp_path / "synthetic-smoke" / "latest.pt")
    eager = load_checkpoint(smoke_run / "latest.pt")
    assert compiled["model"].keys() == eager["model"].keys()  # checkpoints work with and without compile
    assert all(torch.isfinite(v).all() for v in compiled["model"].values())


def test_compile_without_a_cpp_compiler_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no compiler to be found
    monkeypatch.delenv("CXX", raising=False)
    assert train(tmp_path, "--total-steps", "512", "--set", "train.compile=true") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: train.compile on a CPU needs a C++ compiler")
    assert not (tmp_path / "synthetic-smoke").exists(), "refused before the run folder was made"


@pytest.mark.parametrize("written_by", ["an older layout", "an older random stream"])
def test_resume_from_a_checkpoint_whose_env_state_does_not_fit_restarts_the_copies(tmp_path, capsys, written_by):
    """Checkpoints written before the env's slot-major layout, or before its random stream became counters in
    the state (they saved a torch.Generator's state instead), still resume here: the copies start afresh."""
    from clstm_ppo.training.checkpoint import atomic_save

    args = ["--set", "train.num_envs=8", "--set", "train.eval_every=2"]
    assert train(tmp_path, "--total-steps", "512", *args) == 0
    latest = tmp_path / "synthetic-smoke" / "latest.pt"
    state = load_checkpoint(latest)
    if written_by == "an older layout":
        for name in ("active", "is_call", "strike", "expiry_time", "contracts", "entry_cost", "mark"):
            state["env"][name] = state["env"][name].T.contiguous()  # the older (N, P) layout
    else:
        del state["env"]["key"], state["env"]["draws"]
        state["env"]["generator"] = torch.zeros(5056, dtype=torch.uint8)  # what a CPU torch.Generator saved
    atomic_save(state, latest)
    assert train(tmp_path, "--total-steps", "1024", "--resume-from", "latest", *args) == 0
    assert "env copies start fresh episodes (the saved env state has another layout)" in capsys.readouterr().out
    resumed = load_checkpoint(latest)
    assert resumed["update"] == 4 and resumed["env"]["active"].shape == (5, 8)


def test_a_run_trained_on_gpus_resumes_on_a_machine_without_one(tmp_path, capsys):
    """Where a run executes is chosen per launch: a checkpoint's saved device and threads are not reused, nor its
    Adam's device settings (a run whose optimizer step was a CUDA graph saved a capturable Adam with a tensor rate,
    which cannot step on a CPU): it continues as the same checkpoint written by a CPU run does."""
    from clstm_ppo.training.checkpoint import atomic_save

    args = ["--set", "train.num_envs=8", "--set", "train.eval_every=2"]
    assert train(tmp_path, "--total-steps", "512", *args) == 0
    latest = tmp_path / "synthetic-smoke" / "latest.pt"
    shutil.copytree(tmp_path / "synthetic-smoke", tmp_path / "cpu" / "synthetic-smoke")
    state = load_checkpoint(latest)
    assert state["config"]["train"]["device"] == "auto", "the resolved device must not be written as the user's choice"
    state["config"]["train"].update(device="cuda", threads_per_worker=8)  # as written on a GPU machine
    for group in state["optimizer"]["param_groups"]:  # by make_adam(..., capture_on=cuda), loaded to the CPU
        group.update(capturable=True, foreach=True, lr=torch.tensor(group["lr"]))
    atomic_save(state, latest)
    assert train(tmp_path, "--total-steps", "1024", "--resume-from", "latest", *args) == 0
    assert train(tmp_path / "cpu", "--total-steps", "1024", "--resume-from", "latest", *args) == 0
    assert load_checkpoint(latest)["update"] == 4
    cpu_written = final_params(tmp_path / "cpu" / "synthetic-smoke")
    for name, value in final_params(tmp_path / "synthetic-smoke").items():
        assert torch.equal(value, cpu_written[name]), name
    assert train(tmp_path, "--total-steps", "1536", "--resume-from", "latest", "--device", "cuda", *args) == 2
    assert "--device cuda was asked for" in capsys.readouterr().err  # asked for in this command: still an error


def test_rollout_from_cached_bar_codes_equals_encoding_each_window(tmp_path):
    """The rollout encodes each bar once when the split is shorter than a rollout; decisions must not change."""
    from clstm_ppo.config import load_config
    from clstm_ppo.training.runner import Trainer

    cfg = load_config(SMOKE, ["train.num_envs=32"])  # 32 x 32 decisions > the split's 998 observable bars
    trainer = Trainer(cfg, tmp_path, torch.device("cpu"))
    trainer.train_step()  # weights away from their initial values
    codes = trainer.bar_codes()
    assert codes is not None
    obs, gen = trainer.env.reset(), torch.Generator().manual_seed(0)
    for _ in range(20):
        cached, fresh = trainer.policy(obs, codes), trainer.policy(obs, None)
        torch.testing.assert_close(cached[0], fresh[0], rtol=1e-5, atol=1e-5)  # logits
        torch.testing.assert_close(cached[1], fresh[1], rtol=1e-5, atol=1e-5)  # values
        trainer.lstm_state = fresh[2]
        obs = trainer.env.step(torch.multinomial(obs.mask.float(), 1, generator=gen).squeeze(-1)).obs
    cfg.train.num_envs = 16  # 16 x 32 decisions < 998 bars: encoding per step is less work
    assert Trainer(cfg, tmp_path / "small", torch.device("cpu")).bar_codes() is None


def test_workers_keep_freed_host_memory_where_glibc_allows():
    import platform

    from clstm_ppo.device import keep_freed_host_memory

    # True exactly where the C library is glibc (mallopt took both settings); elsewhere a harmless no-op.
    on_glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert keep_freed_host_memory() is on_glibc


def test_threads_follow_the_cores_this_process_may_use_not_the_machines(tmp_path, monkeypatch, capsys):
    """Pinned to 3 cores of a 64-core machine (taskset, a cpuset), a worker runs 3 threads: more would only wait
    for each other."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    try:
        assert train(tmp_path, "--total-steps", "512") == 0
    finally:
        torch.set_num_threads(1)  # the suite's one thread (tests/conftest.py)
    assert "1 worker(s) on cpu (3 thread(s) each)" in capsys.readouterr().out


def test_tensorboard_gets_the_same_scalars_as_metrics_jsonl(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = tmp_path / "board"
    assert train(tmp_path, "--total-steps", "1024", "--set", "train.num_envs=8", "--eval-every", "2",
                 "--tensorboard", str(board)) == 0
    events = EventAccumulator(str(board))
    events.Reload()
    records = [strict_loads(line) for line in (tmp_path / "synthetic-smoke" / "metrics.jsonl").read_text().splitlines()]
    for kind, key in (("update", "policy_loss"), ("update", "learning_rate"), ("eval", "composite")):
        logged = {r["step"]: r[key] for r in records if r["kind"] == kind}
        scalars = {e.step: e.value for e in events.Scalars(f"{kind}/{key}")}
        assert logged and set(scalars) == set(logged), (kind, key)
        assert all(scalars[s] == pytest.approx(v, rel=1e-6, abs=1e-9) for s, v in logged.items())


def test_an_unwritable_tensorboard_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("a file, not a folder")
    assert train(tmp_path, "--total-steps", "512", "--tensorboard", str(tmp_path / "file" / "board")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --tensorboard") and err.count("\n") == 1


def test_a_run_trains_and_resumes_from_python(tmp_path):
    """train_run is what `python -m clstm_ppo.train` calls: it returns the run folder, resumes from a named
    checkpoint with the run's own settings, and a bad setting is the command's one-line ConfigError."""
    from clstm_ppo.config import ConfigError
    from clstm_ppo.training.launch import train_run

    common = [f"train.checkpoint_dir={tmp_path}", "train.run_name=lib", "train.num_envs=8", "ppo.num_steps=16"]
    run = train_run("smoke", [*common, "train.total_steps=256"])
    assert run == tmp_path / "lib" and load_checkpoint(run / "latest.pt")["update"] == 2
    assert train_run("smoke", [*common, "train.total_steps=512"], resume_from="latest") == run
    assert load_checkpoint(run / "latest.pt")["update"] == 4
    with pytest.raises(ConfigError, match="ppo.no_such_key"):
        train_run("smoke", ["ppo.no_such_key=1"])
    with pytest.raises(ConfigError, match="contradict"):
        train_run("smoke", common, resume_from="latest", fresh_start=True)
