"""``python -m clstm_ppo.adapt``: fine-tune a trained agent on a new underlying with K env steps
of PPO, then backtest it on the new underlying's test split beside zero-shot,
from-scratch-with-K and buy-and-hold.

    clstm-ppo-adapt --checkpoint checkpoints/<run>/best_composite.pt
        --data new_stock.csv --steps 50000
        [--part encoder|all] [--set data.symbols=[UNH]] [--out DIR] [--json F]

Adaptation continues the checkpoint through the trainer with the checkpoint's settings, its
normalisation statistics and its optimizer state, on the new data's training split: K env steps, the
learning rate decaying over them, validation walks and best_*.pt as in training. ``--part encoder``
trains LSTM 1 + MLP alone. Scratch trains a fresh agent of the same settings for the same K. The
zero-shot row is exactly ``evaluate`` of the checkpoint on the same data and split. From Python:
``clstm_ppo.training.adaptation.adapt_checkpoint`` (docs/ADAPTATION.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from clstm_ppo.backtest.report import format_report
from clstm_ppo.cli import check_output_path, run_cli
from clstm_ppo.data.dataset import SPLITS
from clstm_ppo.device import DEVICE_CHOICES
from clstm_ppo.tables import strict_json
from clstm_ppo.training.adaptation import adapt_checkpoint


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="clstm-ppo-adapt",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--checkpoint", required=True, help="a .pt file written by python -m clstm_ppo.train"
    )
    p.add_argument(
        "--data", required=True, help="the new underlying(s): a built-in name or a CSV/parquet file"
    )
    p.add_argument(
        "--steps", type=int, required=True, help="K: env steps of PPO on the new training split"
    )
    p.add_argument(
        "--part", default="all", choices=("encoder", "all"), help="what adaptation trains"
    )
    p.add_argument("--split", default="test", choices=SPLITS, help="the split the four rows walk")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting of the checkpoint's, e.g. --set data.symbols=[UNH]",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the adaptation's and scratch's seed (default: the run's)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder of the adapted and scratch runs "
        "(default checkpoints/adapt-<checkpoint run>-<data>-<K>)",
    )
    p.add_argument("--no-scratch", action="store_true", help="skip the from-scratch row")
    p.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--json", type=Path, default=None, help="write every row's metrics to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_output_path("--json", args.json)  # before minutes of training, not after them
    if args.threads:
        torch.set_num_threads(args.threads)
    done = adapt_checkpoint(
        args.checkpoint,
        args.data,
        args.steps,
        part=args.part,
        split=args.split,
        overrides=args.overrides,
        seed=args.seed,
        out=args.out,
        scratch=not args.no_scratch,
        device=args.device,
    )
    print(f"\n{args.split} split of {args.data}, K = {args.steps:,} env steps ({args.part}):")
    print(format_report(done.results))
    for name, row in done.report["summary"].items():
        print(
            f"  {name:<13} mean Sharpe {row['sharpe']:>7.3f}  mean total return "
            f"{row['total_return']:>8.4f}"
        )
    if args.json:
        args.json.write_text(strict_json(done.report, indent=2, default=str))
        print(f"every number written to {args.json}")
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
