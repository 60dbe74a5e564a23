"""What every command-line entry shares: --config/--set, and one-line errors
instead of tracebacks."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from clstm_ppo.config import Config, ConfigError, load_config
from clstm_ppo.data.errors import DataError
from clstm_ppo.distributed import StrayRankVariables, TrainingFailure
from clstm_ppo.run_files.checkpoint import CheckpointError

USER_ERRORS = (ConfigError, DataError, CheckpointError, TrainingFailure, StrayRankVariables)
# what a shell reports for a tool a closed pipe stopped (128 + SIGPIPE), as for `yes | head`
CLOSED_PIPE_STATUS = 141


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=None,
        help="a named config (default, smoke, paper) or a YAML file of settings",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting, e.g. --set data.window=20 (repeatable)",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    return load_config(args.config, args.overrides)


def check_output_path(
    flag: str, path: Path | None, suffixes: tuple[str, ...] | None = None
) -> None:
    """Before minutes of work: ``path`` can be written as a file of its format (a file of
    ``suffixes``, not a folder, in a folder this process can write in, made if missing), else one
    line naming ``flag``'s fix."""
    if path is None:
        return
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise ConfigError(f"{flag} {path}: end the name in {' or '.join(suffixes)}")
    if path.is_dir():
        ending = suffixes[0] if suffixes else ".json" if flag == "--json" else ""
        raise ConfigError(
            f"{flag} {path} is a folder, not a file; name a file inside it, e.g. {flag} "
            f"{path / ('report' + ending)}"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"{flag} {path}: cannot make its folder ({err.strerror}); choose another path"
        ) from None
    try:
        with tempfile.TemporaryFile(dir=path.parent):
            # a read-only folder or mount shows here, not at the end
            pass
        if path.exists():
            with open(path, "r+b"):  # an existing file it could not replace
                pass
    except OSError as err:
        raise ConfigError(
            f"{flag} {path}: cannot write there ({err.strerror or err}); choose another path"
        ) from None


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run ``main``; a user error prints one line on stderr and exits 2, never a traceback. Output
    piped into a reader that stops early (``| head``) ends the command quietly."""
    try:
        return main(argv)
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader is gone: whatever is still buffered for stdout would fail again at
        # exit, so stdout becomes /dev/null for the rest of the process (the recipe of
        # Python's signal module documentation).
        with open(os.devnull, "w") as devnull, contextlib.suppress(OSError, ValueError):
            # a captured stdout
            os.dup2(devnull.fileno(), sys.stdout.fileno())
        return CLOSED_PIPE_STATUS
