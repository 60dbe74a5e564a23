"""``python -m clstm_ppo.adapt``: fine-tune a trained agent on a new underlying with K env steps of PPO, then
backtest it on the new underlying's test split beside zero-shot, from-scratch-with-K and buy-and-hold.

    clstm-ppo-adapt --checkpoint checkpoints/<run>/best_composite.pt --data new_stock.csv --steps 50000 \\
        [--part encoder|all] [--set data.symbols=[UNH]] [--out DIR] [--json F]

Adaptation continues the checkpoint through the trainer (clstm_ppo/training/runner.py) with the checkpoint's settings,
its normalisation statistics and its optimizer state, on the new data's training split: K env steps, the
learning rate decaying over them, validation walks and best_*.pt as in training. ``--part encoder`` trains
LSTM 1 + MLP alone. Scratch trains a fresh agent of the same settings for the same K. The zero-shot row is
exactly ``evaluate`` of the checkpoint on the same data and split.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clstm_ppo.agent.from_checkpoint import checkpoint_config, load_agent
from clstm_ppo.agent.model import CascadedActorCritic
from clstm_ppo.agent.optimizer_step import make_adam
from clstm_ppo.backtest.policies import agent_policy
from clstm_ppo.backtest.report import format_report, underlying_metrics
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.walk import buy_and_hold, walk
from clstm_ppo.cli import run_cli
from clstm_ppo.config import Config, ConfigError
from clstm_ppo.data.dataset import SPLITS
from clstm_ppo.data.errors import DataError
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.device import DEVICE_CHOICES, configure_backends, pick_device
from clstm_ppo.env import PORTFOLIO_FEATURES, ActionSpace
from clstm_ppo.market.observed import observed_feature_names, observed_market_data
from clstm_ppo.tables import strict_json
from clstm_ppo.training.checkpoint import has_run, load_checkpoint
from clstm_ppo.training.selection import Selection

ROWS = ("adapted", "zero_shot", "scratch", "buy_and_hold")


def check_feature_set(state: dict[str, Any], path: str, source: str, cfg: Config) -> None:
    """The checkpoint's encoder reads the features it was normalised on; another set is refused in one line."""
    saved, observed = tuple(state["normalizer"]["names"]), observed_feature_names(cfg.data.option_features)
    if saved != observed:
        raise DataError(f"{path} was trained on features {list(saved)}; '{source}' gives {list(observed)}: "
                        "adapt a checkpoint of this version's feature set, or retrain")


def start_state(state: dict[str, Any], model: dict[str, Any], optimizer: dict[str, Any],
                num_envs: int) -> dict[str, Any]:
    """What the trainer's resume path reads to begin a new run from given weights: the checkpoint's normalisation,
    update 0, no env state (the copies start fresh on the new data) and fresh checkpoint selection."""
    return {"normalizer": state["normalizer"], "model": model, "optimizer": optimizer, "scaler": None,
            "update": 0, "global_step": 0, "episodes": 0, "world_size": 1, "num_envs": num_envs,
            **Selection().state_dict()}


def fresh_start(cfg: Config, state: dict[str, Any]) -> dict[str, Any]:
    """A new agent of the checkpoint's settings, initialised as the trainer would, and a fresh Adam."""
    torch.manual_seed(cfg.seed)
    model = CascadedActorCritic(len(observed_feature_names(cfg.data.option_features)), len(PORTFOLIO_FEATURES),
                                ActionSpace.from_config(cfg.market).n, cfg.agent)
    optimizer = make_adam(model.parameters(), cfg.ppo.learning_rate, cfg.ppo)
    return start_state(state, model.state_dict(), optimizer.state_dict(), cfg.train.num_envs)


def train_from_start(cfg: Config, run_dir: Path, device: torch.device, start: dict[str, Any], part: str) -> Path:
    """K env steps of PPO from ``start`` into ``run_dir`` through the trainer; returns its latest.pt."""
    from clstm_ppo.training.runner import Trainer  # imported late: argument errors stay fast

    trainer = Trainer(cfg, run_dir, device, resume=start)
    if part == "encoder":  # the rest keeps its weights: no gradient, so Adam skips it
        for name, param in trainer.model.named_parameters():
            param.requires_grad_(name.startswith("encoder."))
    trainer.run()
    return run_dir / "latest.pt"


def summary(result: WalkResult) -> dict[str, float]:
    rows = [underlying_metrics(result, s) for s in range(len(result.symbols))]
    return {key: float(np.mean([r[key] for r in rows])) for key in ("sharpe", "total_return", "max_drawdown")}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clstm-ppo-adapt", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="a .pt file written by python -m clstm_ppo.train")
    p.add_argument("--data", required=True, help="the new underlying(s): a built-in name or a CSV/parquet file")
    p.add_argument("--steps", type=int, required=True, help="K: env steps of PPO on the new training split")
    p.add_argument("--part", default="all", choices=("encoder", "all"), help="what adaptation trains")
    p.add_argument("--split", default="test", choices=SPLITS, help="the split the four rows walk")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting of the checkpoint's, e.g. --set data.symbols=[UNH]")
    p.add_argument("--seed", type=int, default=None, help="the adaptation's and scratch's seed (default: the run's)")
    p.add_argument("--out", type=Path, default=None, help="folder of the adapted and scratch runs "
                   "(default checkpoints/adapt-<checkpoint run>-<data>-<K>)")
    p.add_argument("--no-scratch", action="store_true", help="skip the from-scratch row")
    p.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--json", type=Path, default=None, help="write every row's metrics to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.steps < 1:
        raise ConfigError(f"--steps {args.steps} must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    state = load_checkpoint(args.checkpoint)
    cfg = checkpoint_config(state, args.checkpoint, args.data, args.overrides)
    check_feature_set(state, args.checkpoint, args.data, cfg)
    observed_market_data(cfg, Normalizer.from_state_dict(state["normalizer"]))  # bad data: one line
    stem = Path(args.data).name.split(".")[0]
    out = args.out or Path(cfg.train.checkpoint_dir) / f"adapt-{Path(args.checkpoint).parent.name}-{stem}-{args.steps}"
    for sub in ("adapted", "scratch"):
        if has_run(out / sub):
            raise ConfigError(f"{out / sub} already holds a run; pick another --out")
    device = pick_device(args.device)
    configure_backends(device)
    cfg.train.total_steps, cfg.train.num_episodes, cfg.train.pretraining = args.steps, 0, False
    cfg.train.device, cfg.train.compile = device.type, False
    if args.seed is not None:
        cfg.seed = args.seed
    paths = {"adapted": train_from_start(cfg, out / "adapted", device,
                                  start_state(state, state["model"], state["optimizer"], cfg.train.num_envs),
                                  args.part)}
    if not args.no_scratch:
        paths["scratch"] = train_from_start(cfg, out / "scratch", device, fresh_start(cfg, state), "all")
    paths["zero_shot"] = Path(args.checkpoint)
    results: dict[str, WalkResult] = {}
    data = None
    for name in ROWS:
        if name == "buy_and_hold" or name not in paths:
            continue
        # zero-shot reads the checkpoint exactly as evaluate does; the new runs carry --data and --set already
        agent_cfg, agent_data, model = (load_agent(args.checkpoint, args.data, args.overrides, device)
                                        if name == "zero_shot" else load_agent(str(paths[name]), None, [], device))
        policy, carried = agent_policy(model, len(agent_data.symbols), device)
        results[name] = walk(name, policy, carried, agent_data, args.split, agent_cfg, device)
        data = data or (agent_data, agent_cfg)
    results["buy_and_hold"] = buy_and_hold(data[0], args.split, data[1])
    print(f"\n{args.split} split of {args.data}, K = {args.steps:,} env steps ({args.part}):")
    print(format_report(results))
    means = {name: summary(res) for name, res in results.items()}
    for name, row in means.items():
        print(f"  {name:<13} mean Sharpe {row['sharpe']:>7.3f}  mean total return {row['total_return']:>8.4f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {name: {sym: underlying_metrics(res, s) for s, sym in enumerate(res.symbols)}
                  for name, res in results.items()}
        args.json.write_text(strict_json({**report, "summary": means, "steps": args.steps, "part": args.part,
                                          "split": args.split, "checkpoints": {k: str(v) for k, v in paths.items()}},
                                         indent=2, default=str))
        print(f"every number written to {args.json}")
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
