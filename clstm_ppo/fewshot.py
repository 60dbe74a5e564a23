"""``python -m clstm_ppo.fewshot``: 3-way BUY/HOLD/SELL few-shot learning on held-out underlyings
(docs/ADAPTATION.md).

    clstm-ppo-fewshot --data dow --method all --json fewshot.json --plot fewshot.png

A task is (underlying, date window): 3 x K support bars and 15 query bars, labelled by the 5-bar
forward return against the 1/3 and 2/3 quantiles of the support returns (clstm_ppo/meta/tasks.py).
k-fold over underlyings: meta-train on the others' training years, meta-test on the held-out ones'
later years (validation + test). Methods: maml (second order; --first-order for FOMAML), protonet,
finetune (pooled pretraining, then SGD on the support set; 0 steps is no adaptation), scratch; the
majority class always. Accuracy, balanced accuracy and macro-F1 with 95% CIs over test episodes,
against the number of adaptation steps.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from clstm_ppo.cli import add_config_arguments, config_from_args, run_cli
from clstm_ppo.config import ConfigError
from clstm_ppo.data.dataset import build_market_data
from clstm_ppo.meta.accuracy_report import format_table, plot_steps
from clstm_ppo.meta.experiment import METHODS, Protocol, run_protocol
from clstm_ppo.meta.maml import MamlConfig
from clstm_ppo.tables import strict_json


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="clstm-ppo-fewshot",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--data",
        default="dow",
        help="a built-in name or a CSV/parquet file with several underlyings",
    )
    p.add_argument("--method", default="all", choices=(*METHODS, "all"))
    p.add_argument(
        "--shots", type=int, default=5, help="support bars per class (default 5: 15 in all)"
    )
    p.add_argument("--query", type=int, default=15, help="query bars per task")
    p.add_argument(
        "--horizon", type=int, default=5, help="k: bars of the forward return a label reads"
    )
    p.add_argument("--folds", type=int, default=3, help="k-fold over underlyings")
    p.add_argument(
        "--iterations", type=int, default=100, help="meta-iterations (and training steps) per fold"
    )
    p.add_argument("--meta-batch", type=int, default=16, help="tasks per meta-iteration")
    p.add_argument("--episodes", type=int, default=600, help="test episodes over all folds")
    p.add_argument(
        "--inner-steps", type=int, default=5, help="MAML's inner SGD steps in meta-training"
    )
    p.add_argument(
        "--first-order", action="store_true", help="first-order MAML (no second derivatives)"
    )
    p.add_argument("--ft-lr", type=float, default=0.1, help="SGD rate of fine-tuning and scratch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--json", type=Path, default=None, help="write every number to this file")
    p.add_argument(
        "--plot", type=Path, default=None, help="balanced accuracy against adaptation steps (.png)"
    )
    add_config_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for flag in ("shots", "query", "horizon", "iterations", "meta_batch", "episodes", "threads"):
        if getattr(args, flag) < 1:
            raise ConfigError(
                f"--{flag.replace('_', '-')} {getattr(args, flag)} must be at least 1"
            )
    if args.folds < 2:
        raise ConfigError(
            f"--folds {args.folds} must be at least 2: some underlyings train, others are held out"
        )
    torch.set_num_threads(args.threads)
    cfg = config_from_args(args)
    cfg.data.source = args.data
    data = build_market_data(cfg.data)
    if len(data.symbols) < args.folds:
        raise ConfigError(
            f"--data {args.data} holds {len(data.symbols)} underlying(s), fewer than --folds "
            f"{args.folds}; give a file with several underlyings"
        )
    protocol = Protocol(
        shots=args.shots,
        n_query=args.query,
        horizon=args.horizon,
        folds=args.folds,
        iterations=args.iterations,
        meta_batch=args.meta_batch,
        test_episodes=args.episodes,
        ft_lr=args.ft_lr,
        seed=args.seed,
        maml=MamlConfig(inner_steps=args.inner_steps, first_order=args.first_order),
    )
    methods = METHODS if args.method == "all" else (args.method,)
    started = time.perf_counter()
    results = run_protocol(data, cfg.agent, methods, protocol)
    shown = {k: v for k, v in results.items() if not k.startswith("_")}
    print(format_table(shown))
    shares = results["_protocol"]["query_class_shares"]
    print(
        f"query classes SELL/HOLD/BUY: {shares[0]:.3f}/{shares[1]:.3f}/{shares[2]:.3f}; chance "
        f"balanced accuracy 1/3; {time.perf_counter() - started:.0f} s"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(strict_json({"data": args.data, **results}, indent=2))
        print(f"every number written to {args.json}")
    if args.plot:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        plot_steps(shown, args.plot)
        print(f"plot written to {args.plot}")
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
