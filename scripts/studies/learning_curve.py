"""What planted-market runs learned as they trained: every periodic checkpoint of each run walked on the test
years (test Sharpe, capture, sell_timing and its greedy form), beside the trainer's validation walk at that update.

    python scripts/studies/learning_curve.py RUN [RUN ...] [--rows docs/data/planted/learning_curve.csv] [--json]

A run keeps its periodic checkpoints when trained with ``--set output.checkpoint_every=N --set output.keep_last=K``
(K at least its updates / N), e.g. through scripts/studies/learning_certificate.py's ``--set``. Rows carry the
commit, machine and date (docs/PLANTED.md).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from clstm_lab.studies.learning_curve import curve_rows
from clstm_ppo.config import ConfigError, load_config, to_dict
from clstm_ppo.run_files.checkpoint import CheckpointError
from clstm_ppo.run_files.run_state import load_checkpoint
from clstm_ppo.tables import append_rows, print_table, provenance

SHOWN = ("run", "update", "env_steps", "val_composite", "val_sharpe", "agent_test_sharpe", "capture", "sell_timing",
         "greedy_sell_timing", "closest_corr")


def market_of(run: Path) -> str:
    """The planted market a run trained on, as text: its data settings."""
    saved = load_checkpoint(next(run.glob("*.pt"))).config  # as the run saved them, read quietly under today's keys
    return json.dumps(to_dict(load_config(None, [], base=saved)).get("data"), sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders of the planted market")
    parser.add_argument("--rows", type=Path, default=None, help="append the rows to this CSV")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    missing = [str(r) for r in args.runs if not (r / "metrics.jsonl").is_file() or not any(r.glob("*.pt"))]
    if missing:
        print(f"error: not a run folder with checkpoints and metrics.jsonl: {', '.join(missing)}; pass the folders "
              "the train command wrote", file=sys.stderr)
        return 2
    torch.set_num_threads(max(args.threads, 1))
    shown, marks = [], {}
    try:
        for run in args.runs:
            market = market_of(run)  # runs of one market share its benchmarks' walks
            rows, marks[market] = curve_rows(run, "cpu", marks.get(market))
            if args.rows is not None:
                append_rows(args.rows, [{**row, **provenance()} for row in rows])
            shown += [{k: row[k] for k in SHOWN} for row in rows]
    except (CheckpointError, ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print_table(shown, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
