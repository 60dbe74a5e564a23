"""One training run of a trial: the train command in a subprocess, followed through the
metrics.jsonl it appends to, and stopped with SIGTERM (the trainer then finishes its update,
writes latest.pt and releases its run-folder lock). No callback into the trainer: its command line
is the whole interface."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

# an update at default sizes takes seconds; SIGKILL only a trainer that ignores SIGTERM
STOP_GRACE_S = 300.0


@dataclass
class TrainSpec:
    """What every run of a study shares: the train command's base settings."""

    config: str
    data: str | None
    steps: int
    threads: int
    overrides: list[str] = field(default_factory=list)

    def command(self, run_dir: Path, seed: int, sets: list[str]) -> list[str]:
        args = [
            sys.executable,
            "-m",
            "clstm_ppo.train",
            "--config",
            self.config,
            "--total-steps",
            str(self.steps),
            "--seed",
            str(seed),
            "--checkpoint-dir",
            str(run_dir.parent),
            "--run-name",
            run_dir.name,
            "--fresh-start",
        ]
        if self.data:
            args += ["--data", self.data]
        # --set after the base --set, so a trial's values win over the study's fixed ones
        for text in [f"launch.threads_per_worker={self.threads}", *self.overrides, *sets]:
            args += ["--set", text]
        return args


class TrainRun:
    """A running train command and what its metrics.jsonl has said so far."""

    def __init__(self, spec: TrainSpec, run_dir: Path, seed: int, sets: list[str]):
        self.run_dir, self.seed = run_dir, seed
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = run_dir.parent / f"{run_dir.name}.log"
        self._log: IO[str] = open(self.log_path, "w")
        self.process = subprocess.Popen(
            spec.command(run_dir, seed, sets),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._offset = 0
        self._partial = ""
        self.evals: list[tuple[int, float]] = []  # (env steps, validation composite), in order
        self.last_step = 0  # the env steps of the last record read (update or eval)

    def read(self) -> None:
        """Take in the records appended since the last read; a half-written last line
        waits for the next."""
        path = self.run_dir / "metrics.jsonl"
        if not path.is_file():
            return
        with open(path) as fh:
            fh.seek(self._offset)
            chunk = fh.read()
            self._offset = fh.tell()
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            self.last_step = max(self.last_step, int(record.get("step", 0)))
            if record.get("kind") == "eval":
                value = record.get("composite")
                self.evals.append(
                    (int(record["step"]), math.nan if value is None else float(value))
                )

    def best_until(self, step: float) -> float:
        """The best validation composite among the walks at or before ``step`` env
        steps (nan: none yet)."""
        values = [v for s, v in self.evals if s <= step and math.isfinite(v)]
        return max(values) if values else math.nan

    def best(self) -> float:
        return self.best_until(math.inf)

    def finished(self) -> bool:
        return self.process.poll() is not None

    def stop(self) -> int:
        """SIGTERM, then wait for the update boundary; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.close()
        return code

    def close(self) -> None:
        if not self._log.closed:
            self._log.close()

    def last_error(self) -> str:
        """The log's last error line (the trainer's one-line errors start with 'error:')."""
        try:
            lines = [
                line.strip()
                for line in self.log_path.read_text(errors="replace").splitlines()
                if line.strip()
            ]
        except OSError:
            return "no log"
        errors = [line for line in lines if line.startswith("error") or "Error" in line]
        return (errors or lines or ["no output"])[-1][:300]
