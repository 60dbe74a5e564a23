"""The agent's decision for the next bar of a file: its action and probabilities, for paper trading.

    python -m clstm_ppo.predict --checkpoint checkpoints/<run>/best_composite.pt --data my_bars.csv
        [--positions book.json] [--json]

It observes the file's last bar (features normalised with the checkpoint's statistics) with a flat
book of the run's initial cash, or the options in --positions (a JSON list of {"right":
"call"|"put", "strike", "expiry": "YYYY-MM-DD", "contracts", "paid"[, "side": "long"|"short"]}; a
short's "paid" is what its sale brought in), and prints the action that would fill at the next bar's
open. LSTM 2 starts afresh at that bar, as at an episode's first decision. The checkpoint's
agent.kind (clstm, lstm or mlp) decides the model that is rebuilt.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clstm_ppo.backtest.next_decision import next_decisions, read_book
from clstm_ppo.cli import run_cli
from clstm_ppo.tables import strict_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m clstm_ppo.predict",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--checkpoint", required=True, help="a .pt file written by python -m clstm_ppo.train"
    )
    parser.add_argument(
        "--data", required=True, help="the bars up to today (a built-in name or a file or folder)"
    )
    parser.add_argument(
        "--positions", type=Path, default=None, help="JSON list of the options held now"
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--json", action="store_true", help="also print the decision as one JSON object, last"
    )
    args = parser.parse_args(argv)
    book = read_book(args.positions) if args.positions else []
    done = next_decisions(
        args.checkpoint, args.data, args.overrides, book, f"--positions {args.positions}"
    )
    for s, decision in enumerate(done.decisions):
        print(
            f"{decision['symbol']} after {decision['date']} (close {done.closes[s]:,.2f}): "
            f"{decision['action_name']}, to fill at the next bar's open"
        )
        print(
            f"  book: {done.positions[s]} position(s), equity ${done.equity[s]:,.2f}, "
            f"cash ${done.cash[s]:,.2f}; critic's value {done.values[s]:+.4f}"
        )
        print(f"  {'action':<22} {'valid':>5} {'probability':>11}")
        for a, name in enumerate(done.action_names):
            print(
                f"  {name:<22} {'yes' if decision['valid'][a] else 'no':>5} "
                f"{decision['probabilities'][a]:>11.4f}"
            )
    if args.json:
        print(strict_json({"checkpoint": args.checkpoint, "decisions": done.decisions}))
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
