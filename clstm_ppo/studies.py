"""Seeded studies built from the public commands (scripts/precision_equivalence.py, scripts/augment_study.py,
scripts/reproduce_paper.py): train a run to its budget, resumably, read its best checkpoint's walk over the test
split, and the statistics over seeds x folds that separate skill from luck (SPEC section 10)."""
from __future__ import annotations

import json
from pathlib import Path

from clstm_ppo.backtest.across_runs import mean_over_underlyings
from clstm_ppo.cli import run_cli
from clstm_ppo.evaluate import main as evaluate_main
from clstm_ppo.train import main as train_main
from clstm_ppo.training.checkpoint import load_checkpoint


def run_finished(run: Path, steps: int) -> bool:
    """The run spent its budget: latest.pt holds at least ``steps`` env steps and a best composite exists."""
    latest = run / "latest.pt"
    if not (latest.exists() and (run / "best_composite.pt").exists()):
        return False
    return load_checkpoint(latest)["global_step"] >= steps


def train_run(config: str, data: str, seed: int, steps: int, folder: Path, name: str, sets: list[str],
              flags: tuple[str, ...] = ()) -> None:
    """Train ``folder/name`` to ``steps`` env steps with ``--set``s (and trainer ``flags``): fresh, or continued
    from latest.pt where an earlier launch was stopped; nothing when it is done already."""
    run = folder / name
    if run_finished(run, steps):
        return
    start = ["--resume-from", "latest"] if (run / "latest.pt").exists() else ["--fresh-start"]
    code = run_cli(train_main, ["--config", config, "--data", data, "--seed", str(seed), "--total-steps", str(steps),
                                "--checkpoint-dir", str(folder), "--run-name", name, *start, *flags,
                                *[x for s in sets for x in ("--set", s)]])
    if code != 0:
        raise SystemExit(f"error: training {name} failed (exit {code})")


def test_split_metrics(run: Path) -> dict[str, float]:
    """The agent's test-split walk of best_composite.pt, averaged over the underlyings (one copy each)."""
    best, report = run / "best_composite.pt", run / "test_report.json"
    # A report older than the checkpoint belongs to an earlier best: walk again.
    if not report.exists() or report.stat().st_mtime < best.stat().st_mtime:
        code = run_cli(evaluate_main, ["--checkpoint", str(best), "--split", "test", "--json", str(report)])
        if code != 0:
            raise SystemExit(f"error: evaluating {run.name} failed (exit {code})")
    agent = mean_over_underlyings(json.loads(report.read_text())["policies"]["agent"])
    return {"test_sharpe": agent["sharpe"], "test_total_return": agent["total_return"]}
