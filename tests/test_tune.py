"""clstm-ppo-tune on the smoke market: the search space's checks, a 4-trial SQLite study and its report, a
pruned trial's run folder, and trials blind to the test split."""
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import make_bars

from clstm_ppo.cli import run_cli
from clstm_ppo.config import ConfigError, load_config, parse_override, to_dict
from clstm_ppo.data import build_market_data
from clstm_ppo.run_files.checkpoint import run_lock
from clstm_ppo.run_files.run_state import load_checkpoint
from clstm_ppo.train import build_parser, resolve_config
from clstm_ppo.tune import main as tune_main
from clstm_ppo.tuning.objective import Objective, report_steps
from clstm_ppo.tuning.runs import TrainSpec
from clstm_ppo.tuning.space import as_overrides, default_space_path, load_space
from clstm_ppo.tuning.study import open_storage, open_study

SPACE = {"params": {"ppo.learning_rate": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
                    "ppo.ent_coef": {"type": "float", "low": 0.0, "high": 0.05},
                    "train.num_envs": {"type": "categorical", "choices": [8, 16]}}}
FAST = ["--config", "smoke", "--set", "train.eval_every=1"]


def write(frame, path: Path) -> str:
    frame.to_csv(path, index=False)
    return str(path)


def space_file(tmp_path: Path, space: dict | str = SPACE) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(space if isinstance(space, str) else yaml.safe_dump(space))
    return str(path)


def one_line_error(capsys, argv: list[str]) -> str:
    assert run_cli(tune_main, argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_the_default_space_is_valid_for_the_named_configs():
    for config in ("default", "smoke", "paper"):
        keys = [p.key for p in load_space(None, config)]
        assert {"ppo.learning_rate", "ppo.ent_coef", "ppo.clip_coef", "ppo.gae_lambda", "data.window",
                "agent.lstm2_hidden", "train.num_envs", "env.position_frac", "env.reward_scale"} <= set(keys)
    assert default_space_path().is_file()


def test_drawn_values_pass_through_set_unchanged():
    values = {"ppo.learning_rate": 1e-05, "ppo.ent_coef": 0.0, "ppo.norm_adv": False, "ppo.lr_schedule": "constant",
              "train.num_envs": 16, "env.reward_scale": 12.345678901234}
    parsed = {}
    for text in as_overrides(values):
        key, value = text.split("=", 1)
        parsed[key] = next(iter(parse_override(f"x={value}").values()))
    assert parsed == values
    assert report_steps(2048) == [205, 410, 614, 819, 1024, 1229, 1434, 1638, 1843, 2048]


@pytest.mark.parametrize("space, words", [
    ("params: {ppo.learning_rate: {type: float, low: 1e-5", "not valid YAML"),
    ("- just a list", "must hold one mapping"),
    ({"params": {"ppo.learning_rat": {"type": "float", "low": 0.1, "high": 0.2}}}, "did you mean ppo.learning_rate"),
    ({"params": {"seed": {"type": "int", "low": 0, "high": 9}}}, "set by the tuner"),
    ({"params": {"ppo.gamma": {"type": "float", "low": 0.9, "high": 1.5}}}, "ppo.gamma"),
    ({"params": {"ppo.gamma": {"type": "float", "low": 0.99, "high": 0.9}}}, "must be below high"),
    ({"params": {"ppo.gamma": {"type": "normal", "low": 0.9, "high": 0.99}}}, "type must be one of"),
    ({"params": {"ppo.learning_rate": {"type": "float", "low": 0.0, "high": 0.1, "log": True}}}, "log scale"),
    ({"params": {"train.num_envs": {"type": "float", "low": 8, "high": 16}}}, "give it type: int"),
    ({"params": {"ppo.lr_schedule": {"type": "categorical", "choices": ["linear", "cosine"]}}}, "cosine"),
])
def test_a_bad_space_file_is_one_line_and_exit_2(tmp_path, capsys, space, words):
    err = one_line_error(capsys, [*FAST, "--trials", "1", "--space", space_file(tmp_path, space),
                                  "--out", str(tmp_path / "out")])
    assert words in err and "space " in err
    assert not (tmp_path / "out" / "study.db").exists()  # refused before any storage was made


@pytest.mark.parametrize("url", ["postgresql://tune:s3cret@127.0.0.1:1/tune", "not-a-url",
                                 "sqlite:////nonexistent-folder/sub/study.db"])
def test_an_unreachable_storage_is_one_line_and_exit_2(tmp_path, capsys, url):
    err = one_line_error(capsys, [*FAST, "--trials", "1", "--space", space_file(tmp_path), "--storage", url,
                                  "--out", str(tmp_path / "out")])
    assert "--storage" in err and "s3cret" not in err  # the password never reaches the terminal


OPEN_TOGETHER = """
import sys, time
from clstm_ppo.tuning.study import open_storage
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # every process opens at the same instant
open_storage(sys.argv[1])
"""


def test_workers_started_together_on_a_new_sqlite_file_all_open_it(tmp_path):
    # the race bench_tune.py met: the losers' CREATE TABLE said "table studies already exists" on SQLite (before
    # the fix, 4 of 5 rounds of 8 processes had a loser)
    for round_ in range(2):
        url, start = f"sqlite:///{tmp_path / f'study{round_}.db'}", time.time() + 5.0
        procs = [subprocess.Popen([sys.executable, "-c", OPEN_TOGETHER, url, str(start)], stderr=subprocess.PIPE,
                                  text=True) for _ in range(8)]
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 8, [e for e in errors if e]
        assert optuna.get_all_study_summaries(open_storage(url)) == []


def test_a_worker_with_other_settings_cannot_join_the_study(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    pruner = optuna.pruners.NopPruner()
    open_study(storage, "s", pruner, None, {"steps": 1024, "seeds": 1})
    open_study(storage, "s", pruner, None, {"steps": 1024, "seeds": 1})  # the same settings join
    with pytest.raises(ConfigError, match="steps=1024"):
        open_study(storage, "s", pruner, None, {"steps": 2048, "seeds": 1})


def test_a_three_trial_sqlite_study_reports_its_best_config(tmp_path):
    out = tmp_path / "study"
    done = subprocess.run([sys.executable, "-m", "clstm_ppo.tune", *FAST, "--trials", "3", "--steps", "512",
                           "--seeds", "2", "--space", space_file(tmp_path), "--out", str(out), "--study", "t",
                           "--sampler-seed", "0"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{out / 'study.db'}")
    trials = study.get_trials()
    assert [t.number for t in trials] == [0, 1, 2]
    assert all(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for t in trials)
    marks = set(report_steps(512))
    for t in trials:
        assert set(t.intermediate_values) <= marks and t.intermediate_values  # the same marks for every trial
        if t.state != optuna.trial.TrialState.COMPLETE:
            continue
        seed_values = []
        for run_dir in map(Path, t.user_attrs["run_dirs"]):  # seeds 0 and 1, each scored by its own walks
            records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
            seed_values.append(max(r["composite"] for r in records if r["kind"] == "eval"))
        assert t.user_attrs["seed_values"] == pytest.approx(seed_values)
        assert t.value == pytest.approx(sum(seed_values) / 2)
        assert t.intermediate_values[512] == pytest.approx(t.value)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trials"] == 3 and summary["best"]["trial"] == study.best_trial.number
    assert set(summary["importances"]) == set(SPACE["params"]) or summary["importances_note"]
    assert (out / "history.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "best: trial" in done.stdout and "history.png" in done.stdout

    # The best YAML is a config the train command takes, and it holds the best trial's settings.
    best_yaml = out / "best.yaml"
    cfg = resolve_config(build_parser().parse_args(["--config", str(best_yaml)]))
    for key, value in study.best_trial.params.items():
        section, name = key.split(".")
        assert getattr(getattr(cfg, section), name) == pytest.approx(value)
    trial_run = Path(study.best_trial.user_attrs["run_dirs"][0])
    ran = to_dict(load_config(str(trial_run / "config.yaml")))
    wanted = to_dict(cfg)
    for values in (ran, wanted):  # where the trial ran, not what it was
        values["output"].update(checkpoint_dir="", run_name="")
        values["launch"].update(threads_per_worker=0)
    assert wanted == ran


def test_a_failed_trial_is_recorded_with_its_error_and_the_study_goes_on(tmp_path, capsys):
    out = tmp_path / "out"  # fp16 passes the settings' checks but the trainer refuses it on a CPU
    code = run_cli(tune_main, [*FAST, "--trials", "2", "--steps", "512", "--space", space_file(tmp_path), "--out",
                               str(out), "--set", "launch.precision=fp16"])
    assert code == 1
    captured = capsys.readouterr()
    assert "no trial of the study finished" in captured.err and "Traceback" not in captured.err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["states"] == {"fail": 2} and "fp16 needs a CUDA device" in summary["failed"]["1"]
    assert "best" not in summary and not (out / "best.yaml").exists()


def test_a_pruned_trial_stops_at_an_update_boundary(tmp_path):
    """The pruner's word: SIGTERM, the run finishes its update, writes latest.pt and releases its lock."""
    class PruneAtOnce:
        number = 7

        def __init__(self):
            self.reported, self.user_attrs = [], {}

        def set_user_attr(self, key, value):
            self.user_attrs[key] = value

        def report(self, value, step):
            self.reported.append((step, value))

        def should_prune(self):
            return True

    steps = 512 * 200  # 200 smoke updates: minutes, were it not pruned
    spec = TrainSpec("smoke", None, steps, 1, ["train.eval_every=1"])
    trial = PruneAtOnce()
    with pytest.raises(optuna.TrialPruned):
        Objective([], spec, tmp_path, seeds=1, poll_s=0.2).run(trial, {"ppo.ent_coef": 0.02})
    assert len(trial.reported) == 1 and trial.user_attrs["stop_exit_codes"] == [0]
    run_dir = Path(trial.user_attrs["run_dirs"][0])
    latest = load_checkpoint(run_dir / "latest.pt")
    assert 1 <= latest.update < 200 and latest.config["ppo"]["ent_coef"] == 0.02
    assert "stop requested: latest.pt written" in (run_dir.parent / f"{run_dir.name}.log").read_text()
    with run_lock(run_dir):  # released: a resume could take the folder at once
        pass


def test_no_trial_reads_the_test_split(tmp_path):
    """Two studies on data that differ only in the test split's bars score their trial identically."""
    bars = make_bars(700, seed=3)
    data = build_market_data(load_config("smoke", [f"data.source={write(bars, tmp_path / 'a.csv')}"]).data)
    future = (bars["Date"] >= str(data.dates[data.splits["test"][0]].date())).to_numpy()
    assert 50 < future.sum() < len(bars) / 2
    changed = bars.copy()
    for column in ("Open", "High", "Low", "Close"):
        changed.loc[future, column] = bars.loc[future, column].to_numpy() * 1.5  # another future entirely
    write(changed, tmp_path / "b.csv")
    space = space_file(tmp_path, {"params": {"ppo.ent_coef": {"type": "categorical", "choices": [0.02]}}})
    scored = {}
    for name in ("a", "b"):
        out = tmp_path / f"study-{name}"
        code = run_cli(tune_main, [*FAST, "--data", str(tmp_path / f"{name}.csv"), "--trials", "1", "--steps", "1024",
                                   "--space", space, "--out", str(out), "--set", "train.num_envs=8"])
        assert code == 0
        (trial,) = optuna.load_study(study_name=f"tune-{name}-smoke", storage=f"sqlite:///{out / 'study.db'}").trials
        scored[name] = (trial.value, trial.intermediate_values)
    assert math.isfinite(scored["a"][0]) and scored["a"] == scored["b"]


def test_the_python_call_refuses_bad_arguments_before_any_trial(tmp_path):
    """tune() from Python (the command's one call): the same one-line errors, nothing written."""
    from clstm_ppo.config import ConfigError
    from clstm_ppo.tuning.search import tune

    with pytest.raises(ConfigError, match="--seeds 0 must be at least 1"):
        tune("smoke", trials=2, seeds=0, out=tmp_path / "a")
    with pytest.raises(ConfigError, match="train.num_episodes"):
        tune("smoke", trials=2, overrides=["train.num_episodes=3"], out=tmp_path / "b")
    assert not list(tmp_path.iterdir())
