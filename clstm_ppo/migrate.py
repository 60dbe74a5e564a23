"""python -m clstm_ppo.migrate OLD.pt NEW.pt [--trust]: convert a checkpoint written before
checkpoints were plain data.

Every command reads a .pt with torch.load(weights_only=True), which never runs code from the file;
checkpoints of the older formats (clstm_ppo-checkpoint-v1, clstm_ppo-scenarios-v1) hold numpy
arrays, which only a full unpickle reads, and a full unpickle runs whatever code a file names. This
command is that one explicit step: it reads OLD (with --trust, by a full unpickle), writes NEW in
today's format and checks NEW loads as data (docs/RELIABILITY.md, "What is safe to load"). Use
--trust only for files you trust: your own runs, or a source you would run code from.
"""

from __future__ import annotations

import argparse
import sys

from clstm_ppo.cli import run_cli
from clstm_ppo.training.migration import migrate_checkpoint


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="clstm-ppo-migrate",
        description=__doc__.split("\n\n")[0],
        epilog="docs/RELIABILITY.md, 'What is safe to load'",
    )
    parser.add_argument(
        "old", metavar="OLD.pt", help="an agent's or a scenario generator's checkpoint"
    )
    parser.add_argument(
        "new", metavar="NEW.pt", help="where the converted checkpoint goes (must not exist)"
    )
    parser.add_argument(
        "--trust",
        action="store_true",
        help="read OLD by a full unpickle, which can run code the file names: only for files you "
        "trust (an old file holds numpy arrays and needs it; a current one is read as data)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(migrate_checkpoint(args.old, args.new, args.trust))
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
