"""The GPU check (lab/clstm_lab/bench/gpu_steps.py, gpu_plan.py; scripts/ops/gpu_check.py) and the GPU-only scripts on a
machine without CUDA: each says so, prints its JSON line, and exits 0."""
import argparse
import importlib
import json
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clstm_lab.bench import gpu_steps
from clstm_lab.bench.gpu_plan import PARTS, part_steps

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, first_line", [("ops/gpu_check.py", "no CUDA device is visible: nothing to check"),
                                                ("bench/count_syncs.py", "no CUDA device is visible: host syncs")])
def test_a_gpu_script_without_cuda_says_so_and_exits_0(script, first_line):
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin",
           **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}  # where the package is not installed
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--json"], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith(first_line)
    assert json.loads(lines[-1]) == {"cuda": False, "rows": []}


class Parsed(Exception):
    """Raised once a command's parser has accepted its arguments, so nothing after the parse runs."""


def test_every_command_the_gpu_check_plans_is_accepted_by_its_parser(monkeypatch):
    """A lent GPU's minutes must not go on a misspelt flag: each planned command's own parser takes its argv."""
    steps = [s for part in PARTS for s in part_steps(part, Path("/tmp/x"), seconds=2.0, skip_compile=False)]
    assert [s.part for s in steps] == sorted((s.part for s in steps), key=PARTS.index)  # parts in order
    real_parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, argv=None, namespace=None):
        real_parse(self, argv, namespace)  # exits 2 on an unknown flag or a bad value
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    for step in steps:
        with pytest.raises(Parsed):
            if step.argv[0] == "-m":
                importlib.import_module(step.argv[1]).main(step.argv[2:])
            else:  # a script run as `python path ...` runs it, in this process: a new interpreter a step costs seconds
                assert (ROOT / step.argv[0]).is_file(), step.argv[0]
                monkeypatch.setattr(sys, "argv", step.argv)
                runpy.run_path(str(ROOT / step.argv[0]), run_name="__main__")


def test_steps_past_the_deadline_are_stopped_or_not_run_and_rows_are_written_as_they_end(tmp_path):
    rows_out = tmp_path / "rows.jsonl"

    def step(label, code):
        def read(done, seconds):
            ok = done is not None and done.returncode == 0
            return [gpu_steps.row(label, ok, round(seconds, 1),
                                  note=done.stdout.strip() if ok else gpu_steps.last_error(done, seconds))]
        return gpu_steps.Step("p", label, ["-c", code], read)

    count_rows = f"import pathlib; print(len(pathlib.Path({str(rows_out)!r}).read_text().splitlines()))"
    steps = [step("first", "print('done')"), step("second", count_rows),
             step("slow", "import time; time.sleep(60)"), step("after", "print('never')")]
    start = time.monotonic()
    rows = list(gpu_steps.run_steps(steps, gpu_steps.Budget(6.0, min_start=1.0), rows_out))
    assert time.monotonic() - start < 20  # the slow step was stopped at the budget, not after its 60 s
    assert [(r["check"], r["passed"]) for r in rows] == [("first", True), ("second", True), ("slow", False),
                                                        ("after", None)]
    assert rows[1]["note"] == "1"  # the first step's row was on file before the second step started
    assert rows[2]["note"].startswith("timed out after")
    assert rows[3]["note"].startswith("not run:")
    written = [json.loads(line) for line in rows_out.read_text().splitlines()]
    assert written == [{"part": "p", **r} for r in rows]


def test_a_step_past_its_cap_is_stopped_and_the_next_step_still_runs():
    """A hung compile must not eat a lease: the step cap stops one step, and the budget goes on to the next."""
    steps = [gpu_steps.script_step("p", "hung", ["-c", "import time; time.sleep(60)"]),
             gpu_steps.script_step("p", "next", ["-c", "pass"])]
    start = time.monotonic()
    rows = list(gpu_steps.run_steps(steps, gpu_steps.Budget(60.0, step_cap=2.0, min_start=1.0), None))
    assert time.monotonic() - start < 30
    assert [(r["check"], r["passed"]) for r in rows] == [("hung", False), ("next", True)]
    assert rows[0]["note"].startswith("timed out after")


def test_a_failed_step_leaves_its_error_output_in_the_log_and_its_last_line_in_the_row(capsys):
    """A row holds one line, often the end of a message spread over several: the traceback's end goes to the log."""
    code = "import sys; print('File step.py, line 7, in flat_row', file=sys.stderr); sys.exit('RuntimeError: ...')"
    rows = list(gpu_steps.run_steps([gpu_steps.script_step("p", "broken", ["-c", code])], gpu_steps.Budget(60.0), None))
    assert rows[0]["passed"] is False and rows[0]["note"] == "RuntimeError: ..."
    log = capsys.readouterr().err
    assert "broken failed (exit status 1)" in log and "in flat_row" in log


@pytest.mark.parametrize("flag", ["--deadline", "--step-cap"])
def test_a_deadline_or_step_cap_that_is_not_positive_is_refused_in_one_line(flag):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "ops" / "gpu_check.py"), flag, "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(f"{flag} must be a positive number of seconds, not 0")


def test_a_bench_row_whose_captured_step_fell_back_to_eager_fails():
    """A capture CUDA refuses only warns (training goes on eagerly): the check must not time that as captured."""
    step = gpu_steps.bench_step("update", "bench_update.py", [], "bench_update")
    rows = [{"path": "compiled", "optimizer_step": "eager", "optimizer_step_asked": "eager", "diff_per_step": 0.01},
            {"path": "step_captured", "optimizer_step": "captured", "optimizer_step_asked": "captured",
             "diff_per_step": 0.02},
            {"path": "step_captured", "optimizer_step": "eager", "optimizer_step_asked": "captured",
             "diff_per_step": 0.0},
            {"step": "graphs", "precision": "bf16", "optimizer_step": "eager", "optimizer_step_asked": "captured"},
            {"step": "graphs", "precision": "fp16", "optimizer_step": "eager", "optimizer_step_asked": "eager"},
            {"path": "captured", "equals_compiled": True}]  # bench_rollout's row: no optimizer step to speak of
    done = subprocess.CompletedProcess([], 0, stdout=json.dumps({"rows": rows}) + "\n", stderr="")
    assert [r["passed"] for r in step.read(done, 1.0)] == [True, True, False, False, True, True]


def test_a_train_row_reads_speed_and_the_checkpoint_cost_from_the_runs_own_records(tmp_path, capsys):
    """The scale rows must say what a 65,536-copy checkpoint costs beside its update: read here from a real run's
    metrics.jsonl and console (trained on the CPU, as the GPU's would be on CUDA)."""
    from clstm_ppo.cli import run_cli
    from clstm_ppo.train import main

    step = gpu_steps.train_step("scale", "run", tmp_path, [], "train run")
    assert run_cli(main, ["--config", "smoke", "--checkpoint-dir", str(tmp_path), "--run-name", "run", "--device",
                          "cpu", "--total-steps", "1024", "--set", "train.num_envs=16"]) == 0
    out = capsys.readouterr().out
    [r] = step.read(subprocess.CompletedProcess([], 0, stdout=out, stderr=""), 5.0)
    assert r["passed"] is True and r["env_steps_per_s"] > 0
    ran, cost = r["note"].split("; ")
    assert ran == "ran as: rollout eager, env step eager, update eager, optimizer step eager, precision fp32"
    size = (tmp_path / "run" / "latest.pt").stat().st_size / 1e6
    assert cost.startswith("last update ") and cost.endswith(f" write of {size:.0f} MB")
    assert " s rollout + " in cost and " s update, its checkpoint " in cost and " s gather + " in cost


@pytest.mark.parametrize(("in_capture", "passed"), [(0, True), (1, False)])
def test_the_shared_gpu_row_fails_where_a_collective_ran_inside_a_capture(tmp_path, in_capture, passed):
    """Two ranks on one GPU pass only if no update called a collective while a CUDA graph was captured (where it
    would deadlock); the note counts each update's collectives."""
    step = gpu_steps.shared_gpu_step("checks", tmp_path)
    assert step.argv[step.argv.index("--num-gpus") + 1] == "2" and "launch.ranks_per_gpu=2" in step.argv
    (tmp_path / "two-ranks").mkdir()
    updates = [{"kind": "update", "collectives_all_reduce": n, "collectives_gather": 1,
                "collectives_in_capture": in_capture if i == 1 else 0} for i, n in enumerate((10, 11))]
    (tmp_path / "two-ranks" / "metrics.jsonl").write_text("".join(json.dumps(u) + "\n" for u in updates))
    [r] = step.read(subprocess.CompletedProcess([], 0, stdout="", stderr=""), 9.0)
    assert r["passed"] is passed
    assert "'all_reduce': [10, 11]" in r["note"] and f"in capture {in_capture}" in r["note"]
