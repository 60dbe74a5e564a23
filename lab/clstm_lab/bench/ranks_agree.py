"""Two ranks sharing one device train as one job: their weights are equal after every update, no collective ran
inside a CUDA-graph capture, and the two-rank run resumes on one CPU rank (scripts/bench/check_ranks_agree.py
prints it; docs/DISTRIBUTED.md and docs/BENCHMARKS.md say what each row shows)."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from clstm_ppo.config import load_config
from clstm_ppo.distributed import find_free_port
from clstm_ppo.training.launch import run_worker, spawn_workers

RUN = "two-ranks"
COPIES = 16  # a rank
STEPS = 32  # a copy, each update (the smoke config's)


def recording_worker(local_rank: int, ctx, cfg, run_dir: Path, resume_path: Path | None, threads: int) -> None:
    """run_worker, keeping this rank's weights after every update in ``run_dir``/../weights-rank<r>.pt."""
    import clstm_ppo.training.runner as runner

    kept: list[dict[str, torch.Tensor]] = []
    original = runner.Trainer.train_step

    def step_and_keep(self):
        out = original(self)
        kept.append({k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()})
        return out

    runner.Trainer.train_step = step_and_keep
    try:
        run_worker(local_rank, ctx, cfg, run_dir, resume_path, threads)
    finally:
        torch.save(kept, run_dir.parent / f"weights-rank{local_rank}.pt")


def largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference over every entry of two state dicts with the same keys."""
    return max(float((a[k].double() - b[k].double()).abs().max()) if a[k].numel() else 0.0 for k in a)


def check(device: str, updates: int, compiled: bool, folder: Path | None = None) -> list[dict[str, Any]]:
    """Rows: the two ranks' weights after each update (equal, bit for bit), the collectives each update made and
    how many of them ran inside a capture (must be 0), and the run resumed on one CPU rank."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(folder or tmp)
        launch = [f"launch.device={device}", "launch.ranks_per_gpu=2"] if device == "cuda" else ["launch.device=cpu"]
        if compiled:
            launch += ["launch.compile_loop=on"] + (["launch.cuda_graphs=on"] if device == "cuda" else [])
        total = updates * 2 * COPIES * STEPS
        cfg = load_config("smoke", [f"train.num_envs={COPIES}", f"train.total_steps={total}", *launch])
        code = spawn_workers(2, cfg, root / RUN, None, find_free_port(), 1, target=recording_worker)
        rows = [{"check": "two-rank run finished", "passed": code == 0, "note": f"exit {code}"}]
        kept = [torch.load(root / f"weights-rank{r}.pt") for r in (0, 1)]
        same = [largest_difference(a, b) for a, b in zip(*kept, strict=True)]
        rows.append({"check": "ranks' weights equal after every update",
                     "passed": len(same) == updates and all(d == 0.0 for d in same),
                     "note": f"{len(same)} updates, largest difference per update {same}"})
        records = [json.loads(line) for line in (root / RUN / "metrics.jsonl").read_text().splitlines()]
        done = [r for r in records if r["kind"] == "update"]
        in_capture = sum(r.get("collectives_in_capture", 0) for r in done)
        counts = {k: [r.get(f"collectives_{k}", 0) for r in done] for k in ("all_reduce", "gather", "broadcast")}
        rows.append({"check": "no collective inside a capture", "passed": bool(done) and in_capture == 0,
                     "note": f"per update {counts}; in capture {in_capture}"})
        resumed = subprocess.run(
            [sys.executable, "-m", "clstm_ppo.train", "--config", "smoke", "--checkpoint-dir", str(root),
             "--run-name", RUN, "--resume-from", "latest", "--device", "cpu",
             "--set", f"train.num_envs={COPIES}", "--total-steps", str(total + 2 * COPIES * STEPS)],
            capture_output=True, text=True, timeout=900)
        said = resumed.stdout + resumed.stderr
        rows.append({"check": f"resume on one CPU rank from two {device} ranks",
                     "passed": resumed.returncode == 0 and "written by 2 worker(s)" in said,
                     "note": "" if resumed.returncode == 0 else said.strip().splitlines()[-1][:160]})
    return rows
