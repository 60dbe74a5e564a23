"""What only a GPU can show: every precision trains, a GPU checkpoint resumes on the CPU and evaluates, and the
env and trainer's speed on the GPU, eager, compiled and replayed as CUDA graphs.

    python scripts/ops/gpu_check.py [--json] [--parts train env rollout checks scale update sb3] [--deadline 530]
        [--step-cap 300] [--rows-out rows.jsonl] [--seconds 2] [--skip-compile] [--plan]

Parts, run in the order given. By default what a GPU has still to show comes first: "train" (train.update_graphs
inside the trainer ran once on an H200, beside the checks, 2.3x faster at default sizes and 18% slower at paper
sizes: it wants timing alone), "env" and "rollout" (the compiled and captured paths are unmeasured since the tick
grid), then what GPUs measured last (an H200's "checks" passed on 2026-11-27, its "scale", "update" and "sb3" the
same day: docs/BENCHMARKS.md): "checks" (every precision, the compiled trainer, a GPU run resumed on the CPU and
that resumed on the GPU again, evaluate, host syncs); "scale" (65,536 copies train one update, evaluate and
checkpoint, at the default and at paper sizes); "update" (the PPO update alone at 4,096 copies, default and paper
sizes in fp32 and default in bf16: eager, static, compiled, compiled with the optimizer step captured (the
trainer's), compiled with CUDA graphs, and that with the optimizer step captured too, each within half an Adam step
of the eager update's weights); "sb3" (sb3-contrib's RecurrentPPO on the same GPU at paper sizes with 256 copies,
beside ours compiled+graphed at the same sizes: 241 s on an H200, alone on the GPU since its ratio is a timing);
"env" (kernels per env step eager and compiled at 4,096 copies, env steps/s eager at 4,096 and 32,768 copies,
compiled and graphed at 32,768); "train" (the trainer at 4,096 copies at default and paper sizes, eager,
compiled+graphed and that with train.update_graphs, 3 timed updates each, with model FLOP utilisation, how its
rollout and optimizer step ran and the rollout's share of the time); "rollout" (policy + env per decision: eager,
compiled, and captured as one CUDA graph at 4,096 and 32,768 copies; the captured rollout must equal the compiled
one bit for bit).

Each step runs a public command in a subprocess (as a user would; the trainer's on the smoke config in a
temporary folder), and the table says pass or fail, env steps/s and the GPU's peak memory (from the run's NVML
records).

A lent GPU machine gives a session minutes, not hours: ``--deadline S`` is the wall-clock budget of the whole
check. A step starts only while at least MIN_START_S seconds are left, and is stopped when the budget runs out
(or after ``--step-cap S`` seconds, so that a hung compile cannot eat the whole budget);
steps that did not start are rows marked "not run", so the table says what is still to measure. ``--rows-out``
appends each row to a JSON-lines file the moment its step ends, so a call killed from outside still leaves every
row measured before it. ``--plan`` lists the steps' commands in order and runs nothing (on any machine).
Without CUDA (and without --plan) it says so and exits 0: nothing here can run on a CPU-only machine.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from clstm_ppo.tables import print_table, strict_json

ROOT = Path(__file__).resolve().parents[2]
SMOKE = "smoke"
PARTS = ("train", "env", "rollout", "checks", "scale", "update", "sb3")
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
    """The check's wall-clock budget (None: no limit), and the most one step may take of it (None: what is left)."""

    def __init__(self, seconds: float | None, step_cap: float | None = None):
        self.end = None if seconds is None else time.monotonic() + seconds
        self.step_cap = math.inf if step_cap is None else step_cap

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


def execute(step: Step, budget: Budget) -> list[dict]:
    """Run one step within what is left of the budget; a "not run" row when too little is left to start it."""
    left = budget.left()
    if left < MIN_START_S:
        return [row(step.label, None, note=f"not run: {max(left, 0.0):.0f} s of the budget left")]
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, *step.argv], capture_output=True, text=True,
                              timeout=min(step.timeout, left, budget.step_cap), cwd=ROOT)
    except subprocess.TimeoutExpired:  # subprocess.run has killed it
        done = None
    if done is not None and done.returncode != 0:  # the row keeps one line; the log gets the traceback's end
        tail = "\n".join(done.stderr.strip().splitlines()[-ERROR_LINES:])
        print(f"--- {step.label} failed (exit status {done.returncode}); its error output ends:\n{tail}",
              file=sys.stderr, flush=True)
    return step.read(done, time.perf_counter() - start)


def script_step(part: str, label: str, argv: list[str]) -> Step:
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
        # Issue 21 item 4: at 65,536 copies the per-update checkpoint must not dominate the update.
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
            notes = {k: r[k] for k in ("setting", "path", "num_envs", "kernels_per_step", "rollout", "update",
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


def part_steps(part: str, folder: Path, args: argparse.Namespace) -> list[Step]:
    """The commands of one part, in the order they run."""
    timed = ["--seconds", str(args.seconds)]
    if part == "env":  # the goal: >= 10M env steps/s at >= 32,768 copies, <= 40 kernels a step compiled
        return [*(bench_step(part, "profile_env.py", ["--num-envs", "4096", *flags], f"profile_env {label} 4096")
                  for flags, label in (([], "eager"), (["--compiled"], "compiled"))),
                bench_step(part, "bench_env.py", ["--sizes", "4096", "32768", *timed], "bench_env eager"),
                *(bench_step(part, "bench_env.py", ["--sizes", "32768", *timed, flag], f"bench_env {label}")
                  for flag, label in (("--compiled", "compiled"), ("--cuda-graphs", "graphed")))]
    if part == "train":  # the goal: >= 500k env steps/s at default sizes, >= 300k at paper sizes
        # Three timed updates after the warm-up: one let the update-graphs row at paper sizes go unexplained.
        return [bench_step(part, "bench_train.py", ["--num-envs", "4096", "--updates", "3", "--settings", "default",
                                                    "paper", "--skip-sb3", *flags], f"bench_train {label}")
                for flags, label in (([], "eager"), (["--compiled", "--cuda-graphs"], "compiled+graphed"),
                                     (["--compiled", "--cuda-graphs", "--update-graphs"], "update graphs too"))]
    if part == "rollout":
        return [bench_step(part, "bench_rollout.py", ["--num-envs", "4096", "32768", "--paths", "eager", "compiled",
                                                      "captured", *timed], "bench_rollout")]
    if part == "sb3":  # the goal: >= 100x sb3-contrib on the same GPU at the same sizes
        # sb3-contrib's envs step on the host (~100 s an update at 256 copies): a short warm-up saves one of them.
        return [bench_step(part, "bench_train.py", ["--updates", "1", "--settings", "paper-256", "--compiled",
                                                    "--cuda-graphs", "--sb3-warmup-steps", "8"],
                           "bench_train vs sb3-contrib", timeout=1800)]
    if part == "scale":  # 65,536 copies on one GPU: one update with its evaluation and checkpoints
        one = ["--set", "train.num_envs=65536", "--total-steps", "1", "--set", "train.eval_every=1"]
        # On an H200 (2026-11-27) one update took 29.6 GB at default sizes and ~90-106 GB at paper sizes
        # (docs/BENCHMARKS.md): on an 80 GB card the paper row's error names the minibatch split that fits.
        return [train_step(part, "scale-default", folder, one, "train 65536 copies default", "default"),
                train_step(part, "scale-paper", folder, one, "train 65536 copies paper", "paper")]
    if part == "update":  # bf16: the LSTMs stay fp32
        return [bench_step(part, "bench_update.py", ["--num-envs", "4096", "--sizes", sizes, "--precision", precision,
                                                     "--paths", "eager", "static", "compiled",
                                                     "step_captured", "graphs", "captured"],
                           f"bench_update {sizes} {precision}")
                for sizes, precision in (("default", "fp32"), ("paper", "fp32"), ("default", "bf16"))]
    steps = [train_step(part, precision, folder, ["--set", f"train.precision={precision}"])
             for precision in ("fp32", "bf16", "fp16")]
    if not args.skip_compile:
        steps.append(train_step(part, "compiled", folder, ["--set", "train.compile=true", "--set", "env.compile=on",
                                                           "--set", "train.cuda_graphs=on"]))
        # The update's loss replayed as CUDA graphs inside the trainer (train.update_graphs: off by default until
        # this row and the "update graphs too" training row pass on a GPU).
        steps.append(train_step(part, "update-graphs", folder, ["--set", "train.update_graphs=true"],
                                "train update graphs"))
    # A GPU-written run continues on the CPU: the env's random streams are counters in its state, on any device, and
    # a captured step's Adam takes the CPU's settings (optimizer_step.fit_saved_state) ...
    return [*steps,
            script_step(part, "resume fp32 run on cpu", [
                "-m", "clstm_ppo.train", "--config", SMOKE, "--checkpoint-dir", str(folder), "--run-name", "fp32",
                "--resume-from", "latest", "--device", "cpu", "--total-steps", "25600"]),
            # ... and back: the CPU-written checkpoint into the capturable Adam of a captured step.
            script_step(part, "resume fp32 run on cuda", [
                "-m", "clstm_ppo.train", "--config", SMOKE, "--checkpoint-dir", str(folder), "--run-name", "fp32",
                "--resume-from", "latest", "--device", "cuda", "--total-steps", "38400"]),
            script_step(part, "evaluate bf16 on cuda", [
                "-m", "clstm_ppo.evaluate", "--checkpoint", str(folder / "bf16" / "latest.pt"), "--device", "cuda",
                "--plot", str(folder / "bf16.png")]),
            syncs_step(part)]


def run_steps(steps: list[Step], budget: Budget, rows_out: Path | None) -> Iterator[dict]:
    """Every step's rows in order, each appended to ``rows_out`` (JSON lines) as soon as its step ends."""
    for step in steps:
        for r in execute(step, budget):
            if rows_out is not None:
                with rows_out.open("a") as f:
                    f.write(strict_json({"part": step.part, **r}) + "\n")
            yield r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS, help="which parts, in this order")
    parser.add_argument("--deadline", type=float, help="wall-clock seconds for the whole check (default: no limit)")
    parser.add_argument("--step-cap", type=float,
                        help="stop any one step after this many seconds (a hung compile must not eat the budget)")
    parser.add_argument("--rows-out", type=Path, help="append each row to this JSON-lines file as its step ends")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per bench_env/rollout row")
    parser.add_argument("--skip-compile", action="store_true", help="leave out the compiled trainer's smoke run")
    parser.add_argument("--plan", action="store_true", help="list the steps' commands in order, run nothing")
    args = parser.parse_args()
    for flag, seconds in (("--deadline", args.deadline), ("--step-cap", args.step_cap)):
        if seconds is not None and seconds <= 0:
            parser.error(f"{flag} must be a positive number of seconds, not {seconds:g}")
    parts = list(dict.fromkeys(args.parts))  # each part once, in the order given
    if args.plan:
        for part in parts:
            for step in part_steps(part, Path("<tmp>"), args):
                print(f"{part:8} {step.label:32} python {shlex.join(step.argv)}")
        return
    if not torch.cuda.is_available():
        print("no CUDA device is visible: nothing to check here (run this on a GPU machine)")
        if args.json:
            print(json.dumps({"cuda": False, "rows": []}))
        return
    budget = Budget(args.deadline, args.step_cap)
    with tempfile.TemporaryDirectory() as tmp:
        steps = [step for part in parts for step in part_steps(part, Path(tmp), args)]
        rows = list(run_steps(steps, budget, args.rows_out))
    print_table(rows, args.json, {"cuda": True, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                  "all_passed": all(r["passed"] is True for r in rows),
                                  "not_run": sum(r["passed"] is None for r in rows)})


if __name__ == "__main__":
    main()
