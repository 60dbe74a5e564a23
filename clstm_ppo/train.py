"""``python -m clstm_ppo.train``: train the cascaded-LSTM PPO agent.

    python -m clstm_ppo.train                              # embedded S&P 500, configs/default.yaml
    python -m clstm_ppo.train --config configs/smoke.yaml  # seconds on a CPU
    python -m clstm_ppo.train --resume-from composite      # continue from the best composite checkpoint
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from clstm_ppo.checkpoint import RESUME_CHOICES, has_run, load_checkpoint, move_aside, resolve_resume
from clstm_ppo.cli import run_cli
from clstm_ppo.config import Config, ConfigError, from_dict, load_config, to_dict
from clstm_ppo.device import configure_backends, pick_device
from clstm_ppo.distributed import DistContext

DEFAULT_CONFIG = Path("configs/default.yaml")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m clstm_ppo.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=None, help=f"YAML settings (default: {DEFAULT_CONFIG} when it exists)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one setting, e.g. --set ppo.learning_rate=1e-4 (repeatable)")
    p.add_argument("--data", help="sp500, synthetic, or a CSV/parquet file or folder (data.source)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--num-episodes", "--num_episodes", type=int, help="stop after this many training episodes")
    budget.add_argument("--total-steps", "--total_steps", type=int, help="stop after this many env steps")
    p.add_argument("--num-envs", "--num_envs", type=int, help="env copies per worker (train.num_envs)")
    p.add_argument("--seed", type=int)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="train.device (default auto)")
    p.add_argument("--num-gpus", "--num_gpus", type=int, default=1, help="workers, one per GPU (-1: every GPU)")
    p.add_argument("--checkpoint-dir", "--checkpoint_dir", help="train.checkpoint_dir (default checkpoints)")
    p.add_argument("--run-name", "--run_name", help="run folder name (default <data>-<config name>)")
    p.add_argument("--resume-from", "--resume_from", metavar="WHICH",
                   help=f"{', '.join(RESUME_CHOICES)} (files of this run) or a checkpoint path")
    p.add_argument("--fresh-start", "--fresh_start", action="store_true",
                   help="move an existing run folder aside (never deleted) and start over")
    p.add_argument("--pretraining", action="store_true", help="pretrain LSTM 1 on next-bar returns first")
    p.add_argument("--eval-every", "--eval_every", type=int, help="updates between validation evaluations")
    p.add_argument("--wandb", action="store_true", help="log to Weights & Biases (WANDB_MODE=offline works)")
    return p


FLAG_TO_SETTING = {
    "data": "data.source", "num_episodes": "train.num_episodes", "total_steps": "train.total_steps",
    "num_envs": "train.num_envs", "seed": "seed", "device": "train.device", "checkpoint_dir": "train.checkpoint_dir",
    "run_name": "train.run_name", "eval_every": "train.eval_every",
}


def resolve_config(args: argparse.Namespace, base: dict | None = None) -> Config:
    """Defaults (or a checkpoint's config), then --config, then --set, then the explicit flags."""
    config_path = args.config if args.config is not None else (DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)
    overrides = list(args.overrides)
    for flag, setting in FLAG_TO_SETTING.items():
        value = getattr(args, flag)
        if value is not None:
            overrides.append(f"{setting}={value}")
    if args.pretraining:
        overrides.append("train.pretraining=true")
    if args.wandb:
        overrides.append("train.wandb=true")
    if args.total_steps is not None:
        overrides.append("train.num_episodes=0")  # an explicit step budget replaces an episode budget
    return load_config(config_path, overrides, base=base)


def default_run_name(cfg: Config, args: argparse.Namespace) -> str:
    source = Path(cfg.data.source).name.split(".")[0] if cfg.data.source not in ("sp500", "synthetic") \
        else cfg.data.source
    config_name = Path(args.config).stem if args.config else "default"
    return f"{source}-{config_name}"


def check_args(args: argparse.Namespace, cfg: Config) -> None:
    if args.num_gpus != 1:
        raise ConfigError(f"--num-gpus {args.num_gpus}: multi-worker training is not built yet; use --num-gpus 1")
    if cfg.train.num_envs < cfg.ppo.num_minibatches or cfg.train.num_envs % cfg.ppo.num_minibatches:
        raise ConfigError(f"train.num_envs ({cfg.train.num_envs}) must be a multiple of ppo.num_minibatches "
                          f"({cfg.ppo.num_minibatches}): minibatches are whole env sequences")
    if cfg.ppo.lr_schedule not in ("linear", "constant"):
        raise ConfigError(f"ppo.lr_schedule {cfg.ppo.lr_schedule!r} is not one of linear, constant")
    for name in ("total_steps", "eval_every", "checkpoint_every", "eval_episodes", "keep_last"):
        if getattr(cfg.train, name) < 1 and not (name == "total_steps" and cfg.train.num_episodes > 0):
            raise ConfigError(f"train.{name} must be at least 1")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.resume_from and args.fresh_start:
        raise ConfigError("--resume-from and --fresh-start contradict each other; pick one")
    cfg = resolve_config(args)
    run_name = cfg.train.run_name or default_run_name(cfg, args)
    run_dir = Path(cfg.train.checkpoint_dir) / run_name
    resume = None
    if args.resume_from:
        resume = load_checkpoint(resolve_resume(args.resume_from, run_dir))
        cfg = resolve_config(args, base=resume["config"])  # the run's own settings, then this command's changes
        print(f"resuming {run_dir} at update {resume['update']} ({resume['global_step']:,} env steps)")
    elif args.fresh_start:
        moved = move_aside(run_dir)
        if moved:
            print(f"--fresh-start: moved the previous run to {moved}")
    elif has_run(run_dir):
        raise ConfigError(f"{run_dir} already holds a run; continue it with --resume-from latest, "
                          "start over with --fresh-start (the old run is moved aside), or pick --run-name")
    check_args(args, cfg)
    device = pick_device(cfg.train.device)
    if device.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // 1))  # one share of the cores per CPU worker
    configure_backends(device)
    from clstm_ppo.runner import Trainer  # imported late: argument errors stay fast

    Trainer(cfg, run_dir, device, DistContext(), resume).run()
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
