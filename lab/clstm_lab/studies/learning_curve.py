"""What a planted-market run learned as it trained: every periodic checkpoint of a run (``update_*.pt``, kept with
``output.keep_last`` large enough) and its last one walked on the test years like the certificate's rows, beside
the validation walk the trainer made at the same update (scripts/studies/learning_curve.py; docs/PLANTED.md).

The certificate walks ``best_composite.pt``, picked on 5 validation years; a curve says whether timing grows with
env steps at all, apart from what selection kept.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from clstm_lab.studies.learning_certificate import measure
from clstm_ppo.run_files.run_state import load_checkpoint

# What a curve row keeps of the certificate's measurement of one checkpoint.
KEPT = ("agent_test_sharpe", "capture", "sell_timing", "greedy_sell_timing", "p_sell_rich", "p_sell_not_rich",
        "closest_rule", "closest_corr", "p_chosen", "best_rule_test_sharpe", "oracle_test_sharpe")


def validation_walks(run: Path) -> dict[int, dict[str, float]]:
    """The trainer's validation walks of ``run`` by env step (``metrics.jsonl``'s eval records)."""
    walks = {}
    with (run / "metrics.jsonl").open() as fh:
        for line in fh:
            record = json.loads(line)
            if record.get("kind") == "eval":
                walks[int(record["step"])] = {"val_composite": record["composite"], "val_sharpe": record["sharpe"]}
    return walks


def checkpoints(run: Path) -> list[Path]:
    """``run``'s periodic checkpoints in update order, then latest.pt unless it is the last of them."""
    periodic = sorted(run.glob("update_*.pt"))
    last = run / "latest.pt"
    if last.exists() and (not periodic or load_checkpoint(last).update != load_checkpoint(periodic[-1]).update):
        periodic.append(last)
    return periodic


def curve_rows(run: Path, device: torch.device | str = "cpu", marks: dict[str, Any] | None = None
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per checkpoint of ``run``: its update and env steps, the trainer's validation walk at that step (where
    it made one) and the test walk's measurement; with the market's ``marks`` for the next run of the same market."""
    walks = validation_walks(run)
    rows = []
    for path in checkpoints(run):
        state = load_checkpoint(path)
        row, marks = measure(path, marks, device, tested=False)  # KEPT holds no test column
        rows.append({"run": run.name, "checkpoint": path.name, "update": state.update, "env_steps": state.global_step,
                     **walks.get(state.global_step, {"val_composite": None, "val_sharpe": None}),
                     **{k: row[k] for k in KEPT}})
    return rows, marks
