"""What every command-line entry shares: --config/--set, and one-line errors instead of tracebacks."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from clstm_ppo.config import Config, ConfigError, load_config
from clstm_ppo.data.errors import DataError
from clstm_ppo.distributed import TrainingFailure
from clstm_ppo.training.checkpoint import CheckpointError

USER_ERRORS = (ConfigError, DataError, CheckpointError, TrainingFailure)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None,
                        help="a named config (default, smoke, paper) or a YAML file of settings")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one setting, e.g. --set data.window=20 (repeatable)")


def config_from_args(args: argparse.Namespace) -> Config:
    return load_config(args.config, args.overrides)


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run ``main``; a user error prints one line on stderr and exits 2, never a traceback."""
    try:
        return main(argv)
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
