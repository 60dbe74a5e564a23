"""The GPU check's steps: one public command each, run in a subprocess within a wall-clock budget, and how its
outcome becomes table rows (scripts/ops/gpu_check.py plans and runs them; docs/BENCHMARKS.md has the figures)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import clstm_ppo
from clstm_ppo.tables import strict_json

ROOT = Path(clstm_ppo.__file__).resolve().parents[1]  # the package's checkout: steps run scripts/ by path from it
SMOKE = "smoke"
ERROR_LINES = 40  # of a failed step's error output, into the log (an H200's failures once showed only a last line)
MIN_START_S = 20.0  # less than this left: a step would only be killed halfway (torch's import alone is ~5 s)

# A step's outcome: its finished process, or None when it was stopped at its timeout, and its seconds.
Reader = Callable[[subprocess.CompletedProcess | None, float], list[dict]]


@dataclass(frozen=True)
class Step:
    """One command of the check and how its outcome becomes table rows."""
    part: str
    label: str
    argv: list[str]  # after the interpreter: "-m module ..." or a script's path and its arguments
    read: Reader
    timeout: float = 900.0


class Budget:
    """The check's wall-clock budget (None: no limit), the most one step may take of it (None: what is left), and
    the least a step needs left to start."""

    def __init__(self, seconds: float | None, step_cap: float | None = None, min_start: float = MIN_START_S):
        self.end = None if seconds is None else time.monotonic() + seconds
        self.step_cap = math.inf if step_cap is None else step_cap
        self.min_start = min_start

    def left(self) -> float:
        return math.inf if self.end is None else self.end - time.monotonic()


def row(check: str, passed: bool | None, seconds: float | str = "", rate: float | str = "",
        memory: float | str = "", note: str = "") -> dict:
    """A table row; ``passed`` None: the step did not run."""
    return {"check": check, "passed": passed, "seconds": seconds, "env_steps_per_s": rate, "gpu_mem_gb": memory,
            "note": note}


def succeeded(done: subprocess.CompletedProcess | None) -> bool:
    """Whether a step's command finished (not stopped at its timeout) with exit status 0."""
    return done is not None and done.returncode == 0


def last_error(done: subprocess.CompletedProcess | None, seconds: float) -> str:
    """Why a command failed: the last line of its error output, its exit status when it printed none (killed), or
    that it was stopped at its timeout."""
    if done is None:
        return f"timed out after {seconds:.0f} s"
    lines = done.stderr.strip().splitlines()
    return lines[-1][:160] if lines else f"exit status {done.returncode}"


def execute(step: Step, budget: Budget, cwd: Path = ROOT) -> list[dict]:
    """Run one step from ``cwd`` (a checkout) within what is left of the budget; a "not run" row when too little is
    left to start it."""
    left = budget.left()
    if left < budget.min_start:
        return [row(step.label, None, note=f"not run: {max(left, 0.0):.0f} s of the budget left")]
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, *step.argv], capture_output=True, text=True,
                              timeout=min(step.timeout, left, budget.step_cap), cwd=cwd)
    except subprocess.TimeoutExpired:  # subprocess.run has killed it
        done = None
    if done is not None and done.returncode != 0:  # the row keeps one line; the log gets the traceback's end
        tail = "\n".join(done.stderr.strip().splitlines()[-ERROR_LINES:])
        print(f"--- {step.label} failed (exit status {done.returncode}); its error output ends:\n{tail}",
              file=sys.stderr, flush=True)
    return step.read(done, time.perf_counter() - start)


def script_step(part: str, label: str, argv: list[str]) -> Step:
    """A command that passes or fails: one row with its seconds, and its last error line if it failed."""
    def read(done: subprocess.CompletedProcess | None, seconds: float) -> list[dict]:
        ok = succeeded(done)
        return [row(label, ok, round(seconds, 1), note="" if ok else last_error(done, seconds))]
    return Step(part, label, argv, read)


def train_step(part: str, name: str, folder: Path, extra: list[str], label: str = "", config: str = SMOKE) -> Step:
    """``config`` (the smoke one unless named) trained on CUDA as run ``name``; speed, the GPU memory in use after
    each update (the caching allocator keeps its peak) and what each update's checkpoint cost, from its
    metrics.jsonl."""
    label = label or f"train {name}"

    def read(done: subprocess.CompletedProcess | None, seconds: float) -> list[dict]:
        path = folder / name / "metrics.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
        updates = [r for r in records if r["kind"] == "update"]
        steps = updates[-1]["step"] if updates else 0
        memory = max((r.get("gpu0_mem_used_gb") or 0.0 for r in updates), default=float("nan"))
        ok = succeeded(done)
        rate = steps / max(sum(r["rollout_s"] + r["update_s"] for r in updates), 1e-9)
        # The trainer's "ran as: ..." line: whether the rollout and optimizer step were captured or fell back.
        ran = [line.strip() for line in (done.stdout if done else "").splitlines() if line.startswith("ran as: ")]
        # At 65,536 copies the per-update checkpoint must not dominate the update: its cost beside the update.
        saves = [r for r in records if r["kind"] == "checkpoint"]
        cost = (f"; last update {updates[-1]['rollout_s']:.1f} s rollout + {updates[-1]['update_s']:.1f} s update, "
                f"its checkpoint {saves[-1]['gather_s']:.2f} s gather + {saves[-1]['save_s']:.2f} s write of "
                f"{saves[-1]['latest_mb']:.0f} MB" if updates and saves else "")
        return [row(label, ok, round(seconds, 1), round(rate), round(memory, 2),
                    (ran[0] if ran else "") + cost if ok else last_error(done, seconds))]
    return Step(part, label, ["-m", "clstm_ppo.train", "--config", config, "--checkpoint-dir", str(folder),
                              "--run-name", name, "--device", "cuda", *extra], read)


def bench_step(part: str, script: str, extra: list[str], label: str, timeout: float = 900.0) -> Step:
    """Rows of one benchmark script's JSON (each row's speed and what it measured), or a failed row."""
    def read(done: subprocess.CompletedProcess | None, seconds: float) -> list[dict]:
        if not succeeded(done):
            return [row(label, False, round(seconds, 1), note=last_error(done, seconds))]
        out = []
        for r in json.loads(done.stdout.strip().splitlines()[-1])["rows"]:
            rate = r.get("env_steps_per_s", r.get("ours_steps_per_s", ""))
            notes = {k: r[k] for k in ("setting", "rule_prior", "path", "num_envs", "kernels_per_step", "rollout",
                                       "update",
                                       "optimizer_step", "rollout_share", "mfu", "sb3_steps_per_s", "ratio",
                                       "same_actions", "equals_compiled", "first_update_s", "ms_per_update",
                                       "decisions_per_s", "diff_per_step", "peak_gb", "update_gb",
                                       "saved_kb_per_decision", "saved_gb_fixed")
                     if r.get(k, "") != ""}
            # A captured rollout must replay what the compiled one computed, bit for bit; an update path must land
            # within half an Adam step of the eager update's weights; a step asked to be captured must have been.
            diff = r.get("diff_per_step", "")
            fell_back = r.get("optimizer_step_asked") == "captured" and r.get("optimizer_step") != "captured"
            passed = (r.get("equals_compiled", True) is not False and not (isinstance(diff, float) and diff > 0.5)
                      and not fell_back)
            out.append(row(label, passed, round(seconds, 1), rate,
                           note=", ".join(f"{k} {v}" for k, v in notes.items())))
        return out
    return Step(part, label, [str(Path("scripts") / "bench" / script), "--device", "cuda", "--json", *extra], read,
                timeout)


def syncs_step(part: str) -> Step:
    """Host syncs as CUDA counts them (the numbers docs/BENCHMARKS.md derives from the code)."""
    def read(done: subprocess.CompletedProcess | None, seconds: float) -> list[dict]:
        ok = succeeded(done)
        counts = json.loads(done.stdout.strip().splitlines()[-1])["rows"] if ok else []
        return [row("host syncs (count_syncs.py)", ok, round(seconds, 1),
                    note="; ".join(f"{c['where']}: {c['syncs']}" for c in counts) or last_error(done, seconds))]
    return Step(part, "host syncs (count_syncs.py)", ["scripts/bench/count_syncs.py", "--json"], read)


def run_steps(steps: list[Step], budget: Budget, rows_out: Path | None, cwd: Path = ROOT) -> Iterator[dict]:
    """Every step's rows in order, each appended to ``rows_out`` (JSON lines) as soon as its step ends."""
    for step in steps:
        for r in execute(step, budget, cwd):
            if rows_out is not None:
                with rows_out.open("a") as f:
                    f.write(strict_json({"part": step.part, **r}) + "\n")
            yield r


def shared_gpu_step(part: str, folder: Path, name: str = "two-ranks") -> Step:
    """Two DDP ranks on one GPU (``launch.ranks_per_gpu=2``, over gloo) on the compiled, graphed path: passes when
    the run finishes, its ranks agree (rank 0 writes one checkpoint) and no update called a collective inside a
    CUDA-graph capture; the note counts each update's collectives (docs/DISTRIBUTED.md)."""
    label = "two ranks on one GPU, compiled + graphed"

    def read(done: subprocess.CompletedProcess | None, seconds: float) -> list[dict]:
        path = folder / name / "metrics.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
        updates = [r for r in records if r["kind"] == "update"]
        in_capture = sum(r.get("collectives_in_capture", 0) for r in updates)
        ok = succeeded(done) and bool(updates) and in_capture == 0
        counts = {k.removeprefix("collectives_"): [r.get(k, 0) for r in updates]
                  for k in ("collectives_all_reduce", "collectives_gather", "collectives_broadcast")}
        note = f"per update {counts}; in capture {in_capture}" if succeeded(done) and updates else \
            last_error(done, seconds)
        return [row(label, ok, round(seconds, 1), note=note)]
    return Step(part, label, ["-m", "clstm_ppo.train", "--config", SMOKE, "--checkpoint-dir", str(folder),
                              "--run-name", name, "--num-gpus", "2", "--set", "launch.ranks_per_gpu=2",
                              "--set", "launch.compile_loop=on", "--set", "launch.cuda_graphs=on",
                              "--total-steps", "12800"],
                read)


def ranks_agree_step(part: str, updates: int = 3) -> Step:
    """scripts/bench/check_ranks_agree.py on CUDA: two ranks on the one GPU, compiled and graphed, compared after
    every update, then resumed on one CPU rank; one row per check it prints."""
    label = "ranks agree (check_ranks_agree.py)"

    def read(done: subprocess.CompletedProcess | None, seconds: float) -> list[dict]:
        lines = done.stdout.strip().splitlines() if done is not None else []
        try:
            checks = json.loads(lines[-1])["rows"] if lines else []
        except (json.JSONDecodeError, KeyError):
            checks = []
        if not checks:
            return [row(label, False, round(seconds, 1), note=last_error(done, seconds))]
        return [row(c["check"], c["passed"], round(seconds, 1), note=c["note"]) for c in checks]
    return Step(part, label, ["scripts/bench/check_ranks_agree.py", "--device", "cuda", "--updates", str(updates),
                              "--json"], read)
