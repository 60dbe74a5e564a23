"""``python -m clstm_ppo.train``: train the cascaded-LSTM PPO agent (the command line of
``clstm_ppo.training.launch.train_run``).

    clstm-ppo-train                          # embedded S&P 500, the default settings
                                               (= --config default)
    clstm-ppo-train --config smoke           # seconds on a CPU; a named config or a YAML file
    clstm-ppo-train --resume-from composite  # continue from the best composite checkpoint
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from clstm_ppo.cli import run_cli
from clstm_ppo.config import Config, named_configs, walk_rules
from clstm_ppo.run_files.checkpoint import RESUME_CHOICES
from clstm_ppo.training.launch import WorkersFailed, settings_of, train_run


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per setting whose field names one (config/sections.py): its help, type and choices
    come from there, and the parsed value lands under the setting's dotted key."""
    # a step budget and an episode budget exclude each other
    budget = parser.add_mutually_exclusive_group()
    for key, tp, rule in walk_rules(Config):
        if rule.flag is None:
            continue
        names = [rule.flag] + (
            [f"--{rule.flag[2:].replace('-', '_')}"] if "-" in rule.flag[2:] else []
        )
        target = budget if key in ("train.total_steps", "train.num_episodes") else parser
        if tp is bool:
            # --no-<flag> too: a setting on by default (pretrain.enabled)
            # can be turned off the same way
            target.add_argument(
                *names,
                dest=key,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"{rule.help} ({key})",
            )
        else:
            target.add_argument(
                *names,
                dest=key,
                type=tp,
                choices=rule.choices,
                metavar=None if rule.choices else key.rsplit(".", 1)[-1].upper(),
                help=f"{rule.help} ({key})",
            )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="clstm-ppo-train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--config",
        default=None,
        help=f"a named config ({', '.join(named_configs())}) or a YAML "
        "file (default: the built-in defaults, the same as --config default)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting, e.g. --set ppo.learning_rate=1e-4 (repeatable)",
    )
    add_setting_flags(p)
    p.add_argument(
        "--num-gpus",
        "--num_gpus",
        type=int,
        default=1,
        help="DDP workers, one per GPU (-1: every visible GPU); without CUDA, "
        "that many CPU workers",
    )
    p.add_argument(
        "--num-workers",
        "--num_workers",
        type=int,
        default=None,
        help="CPU workers over gloo, with --device cpu (one thread each on a small machine); at "
        "most the cores this process may use, unless --oversubscribe",
    )
    p.add_argument(
        "--oversubscribe",
        action="store_true",
        help="allow more CPU workers than usable cores (each waits for a core: "
        "slower, never faster)",
    )
    p.add_argument(
        "--master-port",
        "--master_port",
        type=int,
        default=None,
        help="rendezvous port for spawned workers (default: a free one)",
    )
    p.add_argument(
        "--resume-from",
        "--resume_from",
        metavar="WHICH",
        help=f"{', '.join(RESUME_CHOICES)} (files of this run) or a checkpoint path",
    )
    p.add_argument(
        "--fresh-start",
        "--fresh_start",
        action="store_true",
        help="move an existing run folder aside (never deleted) and start over",
    )
    return p


def setting_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the command's own flags gave (``add_setting_flags``), by dotted key."""
    return {
        key: getattr(args, key)
        for key, _, rule in walk_rules(Config)
        if rule.flag and getattr(args, key) is not None
    }


def resolve_config(args: argparse.Namespace, base: dict | None = None) -> Config:
    """Defaults (or a checkpoint's config), then --config, then --set, then the explicit flags."""
    return settings_of(args.config, args.overrides, setting_flags(args), base=base)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        train_run(
            args.config,
            args.overrides,
            settings=setting_flags(args),
            resume_from=args.resume_from,
            fresh_start=args.fresh_start,
            num_gpus=args.num_gpus,
            num_workers=args.num_workers,
            master_port=args.master_port,
            oversubscribe=args.oversubscribe,
        )
    except WorkersFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
