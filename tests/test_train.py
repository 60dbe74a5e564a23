"""The trainer end to end on the smoke config: learning, best checkpoints, evaluate, logging and monitoring (exact
resume: test_resume.py; what a run says when something goes wrong: test_train_failures.py)."""
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import strict_loads
from smoke_training import SMOKE, train

from clstm_ppo.agent.from_checkpoint import model_from_checkpoint
from clstm_ppo.backtest.policies import agent_policy, random_policy
from clstm_ppo.backtest.walk import selection_metrics, walk, walk_together
from clstm_ppo.cli import run_cli
from clstm_ppo.config import Config, from_dict
from clstm_ppo.data import Normalizer
from clstm_ppo.market.observed import observed_market_data
from clstm_ppo.metrics import COST_FIELDS
from clstm_ppo.run_files.checkpoint import BEST_METRICS
from clstm_ppo.run_files.run_state import load_checkpoint, save_checkpoint
from clstm_ppo.tables import strict_json


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    assert train(root) == 0
    return root / "synthetic-smoke"


def test_trained_agent_beats_a_random_policy_on_validation(smoke_run):
    state = load_checkpoint(smoke_run / "latest.pt")
    cfg = from_dict(Config, state.config)
    data = observed_market_data(cfg, Normalizer.from_state_dict(state.normalizer))
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
        assert state.best[name] == pytest.approx(max(r[name] for r in evaluations(smoke_run)
                                                        if r["step"] <= state.global_step and r[name] is not None))
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


def test_pretraining_learns_next_bar_returns(tmp_path, capsys):
    assert train(tmp_path, "--pretraining", "--total_steps", "512", "--set", "train.num_envs=8",
                 "--set", "pretrain.epochs=4") == 0
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
    assert state.episodes >= 20 and state.config["train"]["num_envs"] == 8
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
                "best_rule", "best_conditional_rule"]
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
    assert list(daily.columns) == [*policies, "tbill"]
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
    state.normalizer["names"] = list(state.normalizer["names"])[:-1]  # a checkpoint of another feature set
    save_checkpoint(state, tmp_path / "other_features.pt")
    assert run_cli(evaluate_main, ["--checkpoint", str(tmp_path / "other_features.pt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: saved normalisation covers features") and err.count("\n") == 1


def test_early_stopping_ends_the_run_after_patience_evaluations(tmp_path, capsys):
    assert train(tmp_path, "--total-steps", str(40 * 256), "--set", "train.num_envs=8", "--eval-every", "1",
                 "--early-stopping-patience", "1") == 0
    out = capsys.readouterr().out
    assert "early stop: 1 evaluations without a new best composite" in out
    state = load_checkpoint(tmp_path / "synthetic-smoke" / "latest.pt")
    assert state.update < 40 and state.evals_without_best == 1


def test_bf16_training_runs_and_fp16_on_cpu_is_refused(tmp_path, capsys):
    """bf16 trains on any CPU: with oneDNN's bf16 LSTMs where the CPU has them, else with the LSTMs in float32,
    and the run's "ran as" line says which, once."""
    from clstm_ppo.agent.precision import cpu_runs_bf16_lstm

    assert train(tmp_path, "--total-steps", "1024", "--set", "train.num_envs=8", "--set", "launch.precision=bf16",
                 "--set", "ppo.grad_accumulation=2") == 0
    said = "precision bf16\n" if cpu_runs_bf16_lstm() else "precision bf16 (LSTMs in fp32: no bf16 LSTM on this CPU)\n"
    assert capsys.readouterr().out.count(said) == 1
    state = load_checkpoint(tmp_path / "synthetic-smoke" / "latest.pt")
    assert state.config["launch"]["precision"] == "bf16" and state.update == 4
    assert all(torch.isfinite(v).all() and v.dtype == torch.float32 for v in state.model.values())
    capsys.readouterr()
    assert train(tmp_path / "x", "--set", "launch.precision=fp16") == 2
    assert capsys.readouterr().err.strip() == ("error: launch.precision fp16 needs a CUDA device; "
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
    assert train(tmp_path, "--total-steps", "1024", "--set", "train.num_envs=8",
                 "--set", "launch.compile_encoder=true") == 0
    compiled = load_checkpoint(tmp_path / "synthetic-smoke" / "latest.pt")
    eager = load_checkpoint(smoke_run / "latest.pt")
    assert compiled.model.keys() == eager.model.keys()  # checkpoints work with and without compile
    assert all(torch.isfinite(v).all() for v in compiled.model.values())


def test_rollout_from_cached_bar_codes_equals_encoding_each_window(tmp_path):
    """The rollout encodes each bar once when the split is shorter than a rollout; decisions must not change."""
    from clstm_ppo.config import load_config
    from clstm_ppo.training.runner import Trainer

    cfg = load_config(SMOKE, ["train.num_envs=32"])  # 32 x 32 decisions > the split's 998 observable bars
    trainer = Trainer(cfg, tmp_path, torch.device("cpu"))
    trainer.train_step()  # weights away from their initial values
    codes = trainer.rollout.bar_codes()
    assert codes is not None
    obs, gen = trainer.env.reset(), torch.Generator().manual_seed(0)
    for _ in range(20):
        cached, fresh = trainer.rollout.policy(obs, codes), trainer.rollout.policy(obs, None)
        torch.testing.assert_close(cached[0], fresh[0], rtol=1e-5, atol=1e-5)  # logits
        torch.testing.assert_close(cached[1], fresh[1], rtol=1e-5, atol=1e-5)  # values
        trainer.rollout.lstm_state = fresh[2]
        obs = trainer.env.step(torch.multinomial(obs.mask.float(), 1, generator=gen).squeeze(-1)).obs
    cfg.train.num_envs = 16  # 16 x 32 decisions < 998 bars: encoding per step is less work
    assert Trainer(cfg, tmp_path / "small", torch.device("cpu")).rollout.bar_codes() is None


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

