"""Names stay names, and every bad input is one line: a run name that is a path, a --fresh-start onto a folder that
is not a run, a checkpoint's saved settings choosing where output goes, workers or samples beyond the machine,
--set values that are not plain YAML, an unusable --checkpoint-dir, stray torchrun variables, outputs that name a
folder, a closed pipe. Each: exit 2 (141 for the pipe), one line naming the command's fix, nothing touched."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from smoke_training import train

from clstm_ppo.cli import run_cli
from clstm_ppo.config import ConfigError, load_config, to_dict

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--total-steps", "512", "--set", "train.num_envs=8"]


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def tree(folder: Path) -> dict[str, int]:
    """Every path under ``folder`` with its modification time: what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("name", ["../escaped", "/tmp/clstm-abs-target", ".", "..", "a/b", "a\\b", "  ", "tab\there"])
@pytest.mark.parametrize("route", ["flag", "set", "yaml"])
def test_a_run_name_is_one_folder_name_from_every_route(tmp_path, capsys, name, route):
    runs = tmp_path / "runs"
    runs.mkdir()
    args = {"flag": ["--run-name", name], "set": ["--set", f"output.run_name={json.dumps(name)}"]}.get(route)
    if args is None:
        (tmp_path / "shared.yaml").write_text(f"output:\n  run_name: {json.dumps(name)}\n")
        args = ["--config", str(tmp_path / "shared.yaml")]
        assert run_cli(__import__("clstm_ppo.train", fromlist=["main"]).main,
                       ["--checkpoint-dir", str(runs), *args, *TINY, "--fresh-start"]) == 2
    else:
        assert train(runs, *args, *TINY, "--fresh-start") == 2
    err = one_line(capsys)
    assert "output.run_name" in err and "--run-name mine" in err
    assert not any(runs.iterdir()) and not (tmp_path / "escaped").exists()
    assert not Path("/tmp/clstm-abs-target").exists()


def test_an_empty_run_name_flag_is_refused_and_python_callers_are_held_to_the_same_rule(tmp_path, capsys):
    assert train(tmp_path, "--run-name", "", *TINY) == 2
    assert "--run-name is empty" in one_line(capsys)
    from clstm_ppo.training.launch import train_run

    with pytest.raises(ConfigError, match="output.run_name '..' names a folder"):
        train_run("smoke", ["output.run_name=..", f"output.checkpoint_dir={tmp_path}"])
    assert not any(tmp_path.iterdir())


def test_fresh_start_refuses_a_folder_that_is_not_a_run_and_touches_nothing(tmp_path, capsys):
    documents = tmp_path / "documents"
    documents.mkdir()
    (documents / "thesis.tex").write_text("years of work")
    (documents / "latest.pt").write_bytes(b"not ours either")
    before = tree(tmp_path)
    assert train(tmp_path, "--run-name", "documents", *TINY, "--fresh-start") == 2
    err = one_line(capsys)
    assert "'thesis.tex', which training never writes" in err and "--run-name" in err
    assert tree(tmp_path) == before, "nothing moved, nothing written"


def test_fresh_start_moves_a_run_with_every_file_training_writes(tmp_path):
    from clstm_ppo.run_files.run_folder import foreign_entry, move_aside

    run = tmp_path / "run"
    (run / "wandb" / "run-1").mkdir(parents=True)
    (run / "tb").mkdir()
    (run / "tb" / "events.out.tfevents.1700000000.host.1.0").write_bytes(b"")
    for name in (".lock", "config.yaml", "metrics.jsonl", "metrics.dropped-20261201-101010.jsonl", "latest.pt",
                 "best_composite.pt", "best_composite_smoothed.pt", "best_sharpe.pt", "update_0000010.pt",
                 ".latest.pt.tmp-123", "pretrain_loss.csv", "wandb_run_id", "test_equity.png", "test_report.json"):
        (run / name).write_text("x")
    assert foreign_entry(run) is None
    moved = move_aside(run)
    assert moved is not None and moved.name.startswith("run.old-") and not run.exists()
    assert (moved / "latest.pt").is_file() and (moved / "wandb" / "run-1").is_dir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "tb").mkdir()
    (tmp_path / "other" / "tb" / "notes.txt").write_text("mine")
    assert foreign_entry(tmp_path / "other") == "tb/", "a folder of other files is not TensorBoard's"
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "latest.pt").symlink_to(tmp_path / "other")
    assert foreign_entry(tmp_path / "linked") == "latest.pt", "a link is never a run's file"


def crafted_config(tmp_path: Path) -> dict:
    """A checkpoint's saved settings that name folders of the file's author's choosing."""
    saved = to_dict(load_config("smoke"))
    saved["output"].update(checkpoint_dir=str(tmp_path / "chosen"), tensorboard=str(tmp_path / "chosen" / "tb"),
                           run_name="../../elsewhere")
    return saved


def test_a_checkpoints_saved_settings_never_choose_where_adapt_or_tensorboard_write(tmp_path):
    from clstm_ppo.agent.from_checkpoint import checkpoint_config
    from clstm_ppo.training.adaptation import default_out

    cfg = checkpoint_config(SimpleNamespace(config=crafted_config(tmp_path)), "shared.pt", None, [])
    assert (cfg.output.checkpoint_dir, cfg.output.tensorboard, cfg.output.run_name) == ("checkpoints", "", "")
    assert default_out(cfg, "runs/a/best_composite.pt", "new.csv", 100) == Path("checkpoints/adapt-a-new-100")
    ours = checkpoint_config(SimpleNamespace(config=crafted_config(tmp_path)), "shared.pt", None,
                             [f"output.checkpoint_dir={tmp_path / 'mine'}", f"output.tensorboard={tmp_path / 'tb'}"])
    assert (ours.output.checkpoint_dir, ours.output.tensorboard) == (str(tmp_path / "mine"), str(tmp_path / "tb"))


def test_a_resume_takes_its_output_folders_from_this_launch(tmp_path):
    from clstm_ppo.training.launch import resume_base, settings_of

    cfg = settings_of(None, [], {"output.checkpoint_dir": str(tmp_path / "here")}, base=resume_base(
        crafted_config(tmp_path)))
    assert (cfg.output.checkpoint_dir, cfg.output.tensorboard, cfg.output.run_name) == (str(tmp_path / "here"), "", "")
    assert cfg.agent.lstm1_hidden == 16, "the run's own settings still come from the checkpoint"


def test_more_cpu_workers_than_cores_need_oversubscribe(tmp_path, capsys, monkeypatch):
    from clstm_ppo.training import launch

    monkeypatch.setattr(launch, "usable_cores", lambda: 2)
    monkeypatch.setattr(launch, "cuda_device_count", lambda: 0)
    for flags in (["--device", "cpu", "--num-workers", "999"], ["--num-gpus", "3"]):
        assert train(tmp_path, *flags, *TINY) == 2
        err = one_line(capsys)
        assert "may use 2 core(s)" in err and "--num-workers 2 or fewer" in err and "--oversubscribe" in err
    assert not any(tmp_path.iterdir()), "a refused launch writes nothing"
    cfg = load_config("smoke", ["launch.device=cpu"])
    assert launch.plan_workers(1, 3, cfg, oversubscribe=True) == (3, "cpu", None)
    assert launch.plan_workers(1, 2, cfg) == (2, "cpu", None)


@pytest.mark.parametrize("command", ["sample", "report"])
def test_a_scenario_sample_larger_than_memory_is_refused_before_the_checkpoint_is_read(tmp_path, capsys, command):
    from clstm_ppo.scenarios.__main__ import main as scenarios_main

    out = ["--out", str(tmp_path / "paths.parquet")] if command == "sample" else []
    argv = [command, "--checkpoint", str(tmp_path / "never-read.pt"), "--paths", "100000000", "--length",
            "100000000", *out]
    assert run_cli(scenarios_main, argv) == 2
    err = one_line(capsys)
    assert "100,000,000 paths x 100,000,000 bars need about" in err and "--no-memory-check" in err
    assert "at most" in err and not any(tmp_path.iterdir())
    # forced, the size is no longer the reason: the (missing) checkpoint is
    assert run_cli(scenarios_main, [*argv, "--no-memory-check"]) == 2
    assert "never-read.pt not found" in one_line(capsys)


def test_a_stress_test_larger_than_memory_is_refused_before_anything_is_read(tmp_path, capsys):
    from clstm_ppo.evaluate import main as evaluate_main

    argv = ["--checkpoint", str(tmp_path / "agent.pt"), "--scenarios", str(tmp_path / "never-read.pt"),
            "--paths", "100000000", "--length", "100000000"]
    assert run_cli(evaluate_main, argv) == 2
    err = one_line(capsys)
    assert "100,000,000 paths x 100,000,000 bars need about" in err and "--no-memory-check" in err
    assert not any(tmp_path.iterdir())
    assert run_cli(evaluate_main, [*argv, "--no-memory-check"]) == 2  # forced: now the missing files are the reason
    assert "not found" in one_line(capsys)


@pytest.mark.parametrize("value", ["data.window=[1", "data.window=!!python/object/apply:os.system ['touch pwned']",
                                   "data.window={a: 1", "data.window=\"unclosed"])
def test_set_values_that_are_not_plain_yaml_are_one_line(tmp_path, capsys, value, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert train(tmp_path, "--set", value, *TINY) == 2
    err = one_line(capsys)
    assert "is not plain YAML" in err and "--set data.window=20" in err
    assert not any(tmp_path.iterdir()), "no tag was run and no run folder made"


@pytest.mark.parametrize("overrides", [["train=3"], ["train=3", "train.num_envs=8"], ["train.num_envs=8", "train="],
                                       ["market.costs=0.1"]])
def test_a_section_set_to_one_value_is_refused(overrides):
    with pytest.raises(ConfigError, match=r"is a section of settings, not one value .* e\.g\. --set "):
        load_config("smoke", overrides)


def test_a_section_set_to_one_value_with_a_flag_is_one_line(tmp_path, capsys):
    assert train(tmp_path, "--set", "train=3", "--num-envs", "8", "--total-steps", "512") == 2
    assert "'train' is a section of settings" in one_line(capsys)
    (tmp_path / "flat.yaml").write_text("train: 3\n")
    with pytest.raises(ConfigError, match="'train' is a section"):
        load_config(str(tmp_path / "flat.yaml"), [], flags={"train.num_envs": 8})


def test_a_checkpoint_dir_that_is_a_file_is_one_line_and_the_file_is_untouched(tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    for folder in (target, target / "runs"):
        assert train(folder, *TINY) == 2
        err = one_line(capsys)
        assert f"--checkpoint-dir {folder}: {target} is a file, not a folder; pass a folder" in err
    assert target.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_an_unwritable_checkpoint_dir_is_one_line_and_no_folder_is_left(tmp_path, capsys):
    """A folder of mode 555; as root, who writes anywhere a mode allows, sysfs (which refuses new files to all)."""
    if not hasattr(os, "geteuid"):
        pytest.skip("POSIX modes")
    locked = Path("/sys/kernel") if os.geteuid() == 0 else tmp_path / "locked"
    if locked == tmp_path / "locked":
        locked.mkdir()
        locked.chmod(0o555)
    before = sorted(p.name for p in locked.iterdir())
    try:
        assert train(locked / "runs", *TINY) == 2
        err = one_line(capsys)
        assert err == (f"error: --checkpoint-dir {locked / 'runs'}: cannot write in {locked} (Permission denied); "
                       "choose a folder you can write to"), err
        assert sorted(p.name for p in locked.iterdir()) == before
    finally:
        if locked == tmp_path / "locked":
            locked.chmod(0o755)


@pytest.mark.parametrize("env, words", [
    ({"RANK": "0"}, "RANK set without WORLD_SIZE, LOCAL_RANK: a partial torchrun environment"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "MASTER_ADDR and MASTER_PORT are not"),
    ({"RANK": "one", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "must be whole numbers"),
    ({"RANK": "3", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
     "do not describe a group"),
])
def test_stray_torchrun_variables_are_one_line(tmp_path, capsys, monkeypatch, env, words):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert train(tmp_path, *TINY) == 2
    err = one_line(capsys)
    assert words in err and "or launch with torchrun" in err and "unset RANK" in err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("flag, name", [("--json", "reports"), ("--plot", "equity.png"), ("--returns", "r.csv")])
def test_evaluate_outputs_are_checked_before_any_checkpoint_is_read(tmp_path, capsys, flag, name):
    from clstm_ppo.evaluate import main as evaluate_main

    folder = tmp_path / name
    folder.mkdir()
    assert run_cli(evaluate_main, ["--checkpoint", str(tmp_path / "never-read.pt"), flag, str(folder)]) == 2
    err = one_line(capsys)
    assert f"{flag} {folder} is a folder, not a file; name a file inside it" in err
    blocked = tmp_path / "a-file"
    blocked.write_text("mine")
    assert run_cli(evaluate_main, ["--checkpoint", str(tmp_path / "never-read.pt"), flag,
                                   str(blocked / name)]) == 2
    assert f"{flag} {blocked / name}: cannot make its folder (File exists)" in one_line(capsys)
    assert blocked.read_text() == "mine"
    locked = Path("/sys/kernel") if os.geteuid() == 0 else tmp_path / "locked"  # root writes past a mode
    if locked == tmp_path / "locked":
        locked.mkdir(mode=0o555)
    assert run_cli(evaluate_main, ["--checkpoint", str(tmp_path / "never-read.pt"), flag, str(locked / name)]) == 2
    assert f"{flag} {locked / name}: cannot write there (Permission denied)" in one_line(capsys)


def test_adapt_checks_its_json_before_training(tmp_path, capsys):
    from clstm_ppo.adapt import main as adapt_main

    assert run_cli(adapt_main, ["--checkpoint", str(tmp_path / "never-read.pt"), "--data", "synthetic", "--steps",
                                "10", "--json", str(tmp_path)]) == 2
    assert f"--json {tmp_path} is a folder" in one_line(capsys)


def test_a_closed_pipe_ends_a_command_quietly():
    program = ("import sys; from clstm_ppo.cli import run_cli\n"
               "def main(argv):\n    for i in range(200_000):\n        print('line', i)\n    return 0\n"
               "sys.exit(run_cli(main, []))")
    proc = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=ROOT)
    assert proc.stdout.readline() == b"line 0\n"
    proc.stdout.close()  # what `| head -1` does once it has its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == "", err
