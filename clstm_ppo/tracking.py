"""Where a run reports: console (tqdm bar and the episode line), metrics.jsonl, and optionally wandb."""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN
    return value


class Tracker:
    """Rank 0's reporting; other ranks never build one."""

    def __init__(self, run_dir: Path, total_steps: int | None, config: dict[str, Any], use_wandb: bool,
                 wandb_project: str, run_name: str, initial_steps: int = 0):
        self.jsonl = open(run_dir / "metrics.jsonl", "a", buffering=1)
        interactive = sys.stderr.isatty()  # in a log file, redraw the bar rarely
        self.bar = tqdm(total=total_steps, initial=initial_steps, unit="step", dynamic_ncols=True,
                        desc="train", smoothing=0.1, mininterval=0.5 if interactive else 30.0)
        self.wandb = None
        if use_wandb:
            import wandb  # imported only when asked for: it is slow to import

            self.wandb = wandb.init(project=wandb_project, name=run_name, config=config, dir=str(run_dir),
                                    resume="allow")
        self.started = time.time()

    def log(self, kind: str, step: int, values: dict[str, Any]) -> None:
        record = {"kind": kind, "step": step, "time": round(time.time() - self.started, 3),
                  **{k: _clean(v) for k, v in values.items()}}
        self.jsonl.write(json.dumps(record) + "\n")
        if self.wandb is not None:
            self.wandb.log({f"{kind}/{k}": v for k, v in values.items() if isinstance(v, (int, float))}, step=step)

    def progress(self, steps: int, postfix: dict[str, str]) -> None:
        self.bar.update(steps)
        self.bar.set_postfix(postfix, refresh=False)

    def write(self, line: str) -> None:
        tqdm.write(line)

    def close(self) -> None:
        self.bar.close()
        self.jsonl.close()
        if self.wandb is not None:
            self.wandb.finish()
