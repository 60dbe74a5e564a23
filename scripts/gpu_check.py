"""What only a GPU can show: every precision trains, a GPU checkpoint resumes on the CPU and evaluates, and the
env and trainer's speed on the GPU, eager, compiled and replayed as CUDA graphs.

    python scripts/gpu_check.py [--json] [--skip-compile] [--seconds 3] [--parts checks speed rollout update scale sb3]

Parts (each fits one 10-minute call; all by default): "checks" (every precision, the compiled trainer, a GPU run
resumed on the CPU, evaluate, host syncs); "speed" (kernels per env step eager and compiled, env steps/s at 32,768
copies eager / compiled / graphed, the trainer at 4,096 copies eager and compiled+graphed at default and paper
sizes with model FLOP utilisation, how its rollout ran and the rollout's share of the time); "rollout" (policy +
env per decision: eager, compiled, and captured as one CUDA graph, at 4,096 and 32,768 copies; the captured
rollout must equal the compiled one bit for bit); "update" (the PPO update alone at 4,096 copies, default and paper
sizes in fp32 and default in bf16: eager, static, compiled, and compiled with CUDA graphs, each within half an Adam
step of the eager update's weights); "scale" (65,536 copies train one update and checkpoint); "sb3" (sb3-contrib's
RecurrentPPO on the same GPU at paper sizes with 256 copies, beside ours). Each check runs the public commands in a
subprocess (as a user would) on the smoke config in a temporary folder, and the table says pass or fail, env
steps/s and the GPU's peak memory (from the run's NVML records).
Without CUDA it says so and exits 0: nothing here can run on a CPU-only machine.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from clstm_ppo.tables import print_table

ROOT = Path(__file__).resolve().parents[1]
SMOKE = "smoke"
PARTS = ("checks", "speed", "rollout", "update", "scale", "sb3")


def run(args: list[str], timeout: float = 900) -> tuple[bool, float, str]:
    """(passed, seconds, the last line of its error output) of one command."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return done.returncode == 0, time.perf_counter() - start, last_error(done)


def last_error(done: subprocess.CompletedProcess) -> str:
    """The last line of a failed command's error output, or its exit status when it printed none (killed)."""
    lines = done.stderr.strip().splitlines()
    return lines[-1][:160] if lines else f"exit status {done.returncode}"


def run_records(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def train_check(name: str, folder: Path, extra: list[str]) -> dict:
    ok, seconds, tail = run(["-m", "clstm_ppo.train", "--config", SMOKE, "--checkpoint-dir", str(folder),
                             "--run-name", name, "--device", "cuda", *extra])
    records = [r for r in run_records(folder / name) if r["kind"] == "update"]
    steps = records[-1]["step"] if records else 0
    memory = max((r.get("gpu0_mem_used_gb") or 0.0 for r in records), default=float("nan"))
    return {"check": f"train {name}", "passed": ok, "seconds": round(seconds, 1),
            "env_steps_per_s": round(steps / max(sum(r["rollout_s"] + r["update_s"] for r in records), 1e-9)),
            "gpu_mem_gb": round(memory, 2), "note": "" if ok else tail}


def script_check(name: str, args: list[str]) -> dict:
    ok, seconds, tail = run(args)
    return {"check": name, "passed": ok, "seconds": round(seconds, 1), "env_steps_per_s": "", "gpu_mem_gb": "",
            "note": "" if ok else tail}


def bench(script: str, extra: list[str], label: str, timeout: float = 900) -> list[dict]:
    """Rows of one benchmark script's JSON (its first row's speed and MFU), or a failed row."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--device", "cuda", "--json", *extra],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if done.returncode != 0:
        return [{"check": label, "passed": False, "seconds": "", "env_steps_per_s": "", "gpu_mem_gb": "",
                 "note": last_error(done)}]
    out = []
    for row in json.loads(done.stdout.strip().splitlines()[-1])["rows"]:
        rate = row.get("env_steps_per_s", row.get("ours_steps_per_s", ""))
        notes = {k: row[k] for k in ("setting", "path", "num_envs", "kernels_per_step", "rollout", "rollout_share",
                                     "mfu", "sb3_steps_per_s", "ratio", "same_actions", "equals_compiled",
                                     "first_update_s", "ms_per_update", "decisions_per_s", "diff_per_step")
                 if row.get(k, "") != ""}
        # A captured rollout must replay what the compiled one computed, bit for bit; an update path must land
        # within half an Adam step of the eager update's weights.
        diff = row.get("diff_per_step", "")
        passed = row.get("equals_compiled", True) is not False and not (isinstance(diff, float) and diff > 0.5)
        out.append({"check": label, "passed": passed, "seconds": "", "env_steps_per_s": rate, "gpu_mem_gb": "",
                    "note": ", ".join(f"{k} {v}" for k, v in notes.items())})
    return out


def checks(folder: Path, args: argparse.Namespace) -> list[dict]:
    rows = []
    for precision in ("fp32", "bf16", "fp16"):
        rows.append(train_check(precision, folder, ["--set", f"train.precision={precision}"]))
    if not args.skip_compile:
        rows.append(train_check("compiled", folder, ["--set", "train.compile=true", "--set", "env.compile=on",
                                                     "--set", "train.cuda_graphs=on"]))
    # A GPU-written run continues on the CPU: the env's random streams are counters in its state, on any device.
    rows.append(script_check("resume fp32 run on cpu", [
        "-m", "clstm_ppo.train", "--config", SMOKE, "--checkpoint-dir", str(folder), "--run-name", "fp32",
        "--resume-from", "latest", "--device", "cpu", "--total-steps", "25600"]))
    rows.append(script_check("evaluate bf16 on cuda", [
        "-m", "clstm_ppo.evaluate", "--checkpoint", str(folder / "bf16" / "latest.pt"), "--device", "cuda",
        "--plot", str(folder / "bf16.png")]))
    # Host syncs as CUDA counts them (the numbers docs/BENCHMARKS.md derives from the code).
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "count_syncs.py"), "--json"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    counts = json.loads(done.stdout.strip().splitlines()[-1])["rows"] if done.returncode == 0 else []
    rows.append({"check": "host syncs (count_syncs.py)", "passed": done.returncode == 0, "seconds": "",
                 "env_steps_per_s": "", "gpu_mem_gb": "",
                 "note": "; ".join(f"{c['where']}: {c['syncs']}" for c in counts) or last_error(done)})
    return rows


def speed(args: argparse.Namespace) -> list[dict]:
    seconds = ["--seconds", str(args.seconds)]
    rows = []
    for flags, label in (([], "eager"), (["--compiled"], "compiled")):
        rows += bench("profile_env.py", ["--num-envs", "4096", *flags], f"profile_env {label} 4096")
    for flags, label in (([], "eager"), (["--compiled"], "compiled"), (["--cuda-graphs"], "graphed")):
        rows += bench("bench_env.py", ["--sizes", "4096", "32768", *seconds, *flags], f"bench_env {label}")
    for flags, label in (([], "eager"), (["--compiled", "--cuda-graphs"], "compiled+graphed")):
        rows += bench("bench_train.py", ["--num-envs", "4096", "--updates", "1", "--settings", "default", "paper",
                                         "--skip-sb3", *flags], f"bench_train {label}")
    return rows


def rollout_rows(args: argparse.Namespace) -> list[dict]:
    """The rollout alone (policy + env) by how each decision runs, captured checked against compiled."""
    return bench("bench_rollout.py", ["--num-envs", "4096", "32768", "--paths", "eager", "compiled", "captured",
                                      "--seconds", str(args.seconds)], "bench_rollout")


def update_rows() -> list[dict]:
    """The PPO update alone by how its minibatch loss runs, each path checked against the eager update."""
    rows = []
    for sizes, precision in (("default", "fp32"), ("paper", "fp32"), ("default", "bf16")):  # bf16: LSTMs in fp32
        rows += bench("bench_update.py", ["--num-envs", "4096", "--sizes", sizes, "--precision", precision,
                                          "--paths", "eager", "static", "compiled", "graphs"],
                      f"bench_update {sizes} {precision}")
    return rows


def scale(folder: Path) -> list[dict]:
    """65,536 copies on one GPU: one update with its checkpoints (the smoke config's sizes)."""
    return [train_check("65536 copies", folder, ["--set", "train.num_envs=65536", "--total-steps", "1",
                                                 "--set", "train.eval_every=1"])]


def sb3_rows() -> list[dict]:
    return bench("bench_train.py", ["--updates", "1", "--settings", "paper-256"], "bench_train vs sb3-contrib",
                 timeout=1800)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    parser.add_argument("--skip-compile", action="store_true", help="leave out the torch.compile run")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per bench_env row")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS, help="which checks to run")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device is visible: nothing to check here (run this on a GPU machine)")
        if args.json:
            print(json.dumps({"cuda": False, "rows": []}))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "checks" in args.parts:
            rows += checks(folder, args)
        if "speed" in args.parts:
            rows += speed(args)
        if "rollout" in args.parts:
            rows += rollout_rows(args)
        if "update" in args.parts:
            rows += update_rows()
        if "scale" in args.parts:
            rows += scale(folder)
        if "sb3" in args.parts:
            rows += sb3_rows()
    print_table(rows, args.json, {"cuda": True, "device": torch.cuda.get_device_name(0),
                                  "torch": torch.__version__, "all_passed": all(r["passed"] for r in rows)})


if __name__ == "__main__":
    main()
