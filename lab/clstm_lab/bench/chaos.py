"""Nothing lost under chaos: random SIGKILLs of a random rank, resumed each time, against an uninterrupted run;
and the faults a run must survive with one line and nothing damaged (docs/RELIABILITY.md; scripts/ops/chaos.py
prints it).

For each worker count the smoke config trains once uninterrupted, then again with a SIGKILL of a random rank
(the launcher or one of its workers) at a random moment, K times, each followed by ``--resume-from latest``.
The final weights, optimizer state, step count and best scores must be bit-identical to the clean run's.
Worker counts run side by side, each with its own random stream (from the seed and the count). Faults, once, two
at a time: a SIGKILL during a checkpoint write (the process is frozen while its temporary file exists, then
killed: the previous latest.pt must load, and the resume removes the leftover); a write that fails (the
file-size limit RLIMIT_FSIZE below a checkpoint's size: one line, latest.pt intact); a torn last line in
metrics.jsonl (the resume drops it with one line, every line is JSON after); two resumes of one run started at
once (one is refused in one line, the other finishes).
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from clstm_ppo.run_files.run_state import RunState, load_checkpoint

UPDATES = 24  # smoke config: 16 copies x 32 steps = 512 env steps an update
STEPS = UPDATES * 512
RUN = "synthetic-smoke"


def command(folder: Path, workers: int, resume: bool, steps: int = STEPS) -> list[str]:
    return [sys.executable, "-m", "clstm_ppo.train", "--config", "smoke", "--checkpoint-dir", str(folder),
            "--total-steps", str(steps), "--num-workers", str(workers), "--oversubscribe",
            "--set", "launch.threads_per_worker=1",
            "--set", "train.eval_every=4", "--set", "output.checkpoint_every=4",
            *(["--resume-from", "latest"] if resume else [])]


def start(folder: Path, workers: int, resume: bool, steps: int = STEPS) -> subprocess.Popen:
    """The train command in its own process group, its output in files beside the run (a pipe nobody reads
    would fill and stall it)."""
    env = {**os.environ, "WANDB_MODE": "offline"}
    folder.mkdir(parents=True, exist_ok=True)
    out, err = open(folder / "stdout.log", "a"), open(folder / "stderr.log", "w")
    return subprocess.Popen(command(folder, workers, resume, steps), stdout=out, stderr=err, text=True, env=env,
                            start_new_session=True)


def stat_fields(stat: Path) -> list[str] | None:
    """A /proc/<pid>/stat's fields after the command name (state, ppid, ...), or None once the process is gone."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def ranks(proc: subprocess.Popen) -> list[int]:
    """The launcher's pid and its workers' (the children multiprocessing spawned), read from /proc."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = stat_fields(stat)
        if fields is None or int(fields[1]) != proc.pid:
            continue
        with contextlib.suppress(OSError):
            cmdline = (stat.parent / "cmdline").read_bytes()
            if b"spawn_main" in cmdline and b"resource_tracker" not in cmdline:  # a rank, not the tracker
                children.append(int(stat.parent.name))
    return [proc.pid, *children]


def updates_logged(folder: Path) -> int:
    path = folder / RUN / "metrics.jsonl"
    if not path.is_file():
        return 0
    return sum('"kind": "update"' in line for line in path.read_text().splitlines())


def freeze(pid: int, wait_s: float = 10.0) -> None:
    """SIGSTOP the process and return once it is stopped: the signal is delivered asynchronously, and a file
    looked at before then may still be renamed under our eyes (a write caught "in progress" that was not)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        fields = stat_fields(Path(f"/proc/{pid}/stat"))
        if fields is None or fields[0] in ("T", "t"):  # stopped, or gone: nothing more will be written
            return
        time.sleep(0.001)


def kill_all(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the rest of the group: a surviving rank would wait at a collective
    except ProcessLookupError:
        pass
    proc.wait()


def finish(folder: Path, workers: int, resume: bool, steps: int = STEPS) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline"}
    return subprocess.run(command(folder, workers, resume, steps), capture_output=True, text=True, env=env, timeout=900)


def final_state(folder: Path) -> RunState:
    return load_checkpoint(folder / RUN / "latest.pt")


def identical(a: RunState, b: RunState) -> bool:
    """Model, optimizer state, counters and best scores equal bit for bit."""
    def same(x, y) -> bool:
        if isinstance(x, torch.Tensor):
            return isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)
        if isinstance(x, dict):
            return isinstance(y, dict) and x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
        if isinstance(x, (list, tuple)):
            return isinstance(y, (list, tuple)) and len(x) == len(y) and all(map(same, x, y))
        return x == y
    return all(same(getattr(a, k), getattr(b, k))
               for k in ("model", "optimizer", "update", "global_step", "episodes", "best"))


def chaos_run(root: Path, workers: int, kills: int, updates: int, rng: random.Random) -> dict:
    clean, chaotic = root / f"clean-{workers}", root / f"chaos-{workers}"
    # A budget the kills cannot outrun: each kill comes 1-4 updates after its run's start, and a run resumes from a
    # checkpoint of every 4th update, so the k-th kill lands by update 4k.
    steps = 512 * workers * max(updates, 4 * kills + 4)
    done = finish(clean, workers, resume=False, steps=steps)
    if done.returncode != 0:
        raise RuntimeError(f"the clean run failed: {last_line(done)}")
    made, victims, finished, error = 0, [], None, ""
    while made < kills:
        resume = (chaotic / RUN / "latest.pt").is_file()
        before = updates_logged(chaotic)
        proc = start(chaotic, workers, resume, steps)
        target = before + rng.randint(1, 4)  # past start-up: a kill lands in a rollout, an update or a write
        while proc.poll() is None and updates_logged(chaotic) < target:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.3))
        if proc.poll() is not None:  # it finished its budget first: nothing left to kill
            finished = proc.wait() == 0
            error = "" if finished else (chaotic / "stderr.log").read_text().strip().splitlines()[-1:]
            break
        pids = ranks(proc)
        victim = rng.randrange(len(pids))
        os.kill(pids[victim], signal.SIGKILL)
        kill_all(proc)
        victims.append("launcher" if victim == 0 else f"worker {victim - 1}")
        made += 1
    if finished is None:
        done = finish(chaotic, workers, resume=(chaotic / RUN / "latest.pt").is_file(), steps=steps)
        finished, error = done.returncode == 0, "" if done.returncode == 0 else last_line(done)
    same = finished and identical(final_state(clean), final_state(chaotic))
    return {"workers": workers, "kills": made, "victims": ", ".join(victims), "finished": finished, "identical": same,
            "updates": final_state(chaotic).update if finished else None, "error": str(error)}


def done_steps(folder: Path) -> int:
    """The env steps a copied run has done: a resume of it must ask for more."""
    return load_checkpoint(folder / RUN / "latest.pt").global_step


def last_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else ""


def fault_kill_during_write(root: Path) -> dict:
    folder = root / "write-kill"
    proc = start(folder, 1, resume=False)
    run, caught = folder / RUN, None
    while proc.poll() is None and caught is None:  # freeze it the moment a write's temporary file exists
        tmp = list(run.glob(".*.tmp-*")) if run.is_dir() else []
        if tmp and (run / "latest.pt").is_file():
            freeze(proc.pid)
            caught = [p for p in tmp if p.exists()]
            if not caught:
                os.kill(proc.pid, signal.SIGCONT)
                caught = None
    kill_all(proc)
    if not caught:
        return {"passed": False, "line": "no checkpoint write was caught in progress"}
    previous = load_checkpoint(run / "latest.pt").update  # must load
    done = finish(folder, 1, resume=True, steps=(previous + 2) * 512)  # two updates past it: the leftover is gone
    leftover = list(run.glob(".*.tmp-*"))
    line = next((x for x in done.stdout.splitlines() if x.startswith("removed ")), "")
    return {"passed": done.returncode == 0 and not leftover and bool(line), "line": line,
            "note": f"killed writing {caught[0].name}; latest.pt loaded at update {previous}"}


def fault_write_fails(root: Path, source: Path) -> dict:
    folder = root / "write-fails"
    shutil.copytree(source, folder)
    latest = folder / RUN / "latest.pt"
    size, before = latest.stat().st_size, load_checkpoint(latest).update

    def limit() -> None:  # a file-size limit below one checkpoint: every checkpoint write fails
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the process instead of failing write
        resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, size // 2))

    args = command(folder, 1, True)
    args[args.index("--total-steps") + 1] = str(done_steps(folder) + 4 * 512)
    done = subprocess.run(args, capture_output=True, text=True, timeout=900, preexec_fn=limit,
                          env={**os.environ, "WANDB_MODE": "offline"})
    intact = load_checkpoint(latest).update == before
    line = last_line(done)
    # The first write past the limit fails: a checkpoint, or metrics.jsonl once it is the larger file
    return {"passed": done.returncode != 0 and line.startswith("error: could not write ")
            and intact and not list((folder / RUN).glob(".*.tmp-*")), "line": line}


def fault_torn_metrics(root: Path, source: Path) -> dict:
    folder = root / "torn"
    shutil.copytree(source, folder)
    metrics = folder / RUN / "metrics.jsonl"
    with open(metrics, "a") as fh:
        fh.write('{"kind": "update", "step": 99999')  # the write a crash cut short
    args = command(folder, 1, True)
    args[args.index("--total-steps") + 1] = str(done_steps(folder) + 2 * 512)
    done = subprocess.run(args, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "WANDB_MODE": "offline"})
    line = next((x for x in (done.stdout + done.stderr).splitlines() if x.startswith("metrics.jsonl: dropped")), "")
    valid = all(json.loads(x) is not None for x in metrics.read_text().splitlines())
    return {"passed": done.returncode == 0 and bool(line) and valid, "line": line}


def fault_two_resumes(root: Path, source: Path) -> dict:
    folder = root / "twice"
    shutil.copytree(source, folder)
    args = command(folder, 1, True)
    args[args.index("--total-steps") + 1] = str(done_steps(folder) + 4 * 512)
    env = {**os.environ, "WANDB_MODE": "offline"}
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    outs = [(p.wait(timeout=900), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in outs)
    refused = next((err.strip().splitlines()[-1] for code, err in outs if code != 0 and err.strip()), "")
    return {"passed": codes[0] == 0 and codes[1] != 0 and "is in use by a training process" in refused,
            "line": refused}


def run_chaos(workers: list[int], kills: int, updates: int = UPDATES, seed: int = 0) -> dict[str, Any]:
    """Every worker count's chaos run, then the four faults: {"identical": {count: bool}, "runs": rows, "faults":
    {name: {"passed", "line", ...}}}."""
    # Two at a time: each run is mostly a new interpreter importing torch, one core's work. Every run keeps its
    # own folder and its own random stream, so what one checks does not depend on what runs beside it.
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=2) as pool:
        root = Path(tmp)
        rows = list(pool.map(lambda w: chaos_run(root, w, kills, updates, random.Random(f"{seed}-{w}")), workers))
        clean = root / f"clean-{workers[0]}"
        running = {"kill_during_write": pool.submit(fault_kill_during_write, root),
                   "write_fails": pool.submit(fault_write_fails, root, clean),
                   "torn_metrics_line": pool.submit(fault_torn_metrics, root, clean),
                   "two_resumes": pool.submit(fault_two_resumes, root, clean)}
        faults = {name: future.result() for name, future in running.items()}
    return {"identical": {str(r["workers"]): r["identical"] for r in rows}, "runs": rows, "faults": faults}
