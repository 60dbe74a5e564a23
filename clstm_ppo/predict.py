"""The agent's decision for the next bar of a file: its action and probabilities, for paper trading.

    python -m clstm_ppo.predict --checkpoint checkpoints/<run>/best_composite.pt --data my_bars.csv
        [--positions book.json] [--json]

It observes the file's last bar (features normalised with the checkpoint's statistics) with a flat book
of the run's initial cash, or the options in --positions (a JSON list of {"right": "call"|"put", "strike",
"expiry": "YYYY-MM-DD", "contracts", "paid"[, "side": "long"|"short"]}; a short's "paid" is what its sale
brought in), and prints the action that would fill at the next bar's open.
LSTM 2 starts afresh at that bar, as at an episode's first decision. The checkpoint's agent.kind (clstm,
lstm or mlp) decides the model that is rebuilt.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from clstm_ppo.agent.from_checkpoint import checkpoint_config, model_from_checkpoint
from clstm_ppo.cli import run_cli
from clstm_ppo.config import ConfigError
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv, BookedPosition
from clstm_ppo.market.observed import observed_market_data
from clstm_ppo.tables import strict_json
from clstm_ppo.training.checkpoint import load_checkpoint

BOOK_KEYS = ("right", "strike", "expiry", "contracts", "paid")


def read_book(path: Path) -> list[BookedPosition]:
    """Positions from a JSON file, or a one-line error saying what is wrong in it."""
    try:
        rows = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"--positions {path}: cannot read it as JSON ({err}); give a list of positions") from None
    if not isinstance(rows, list):
        raise ConfigError(f"--positions {path}: give a JSON list of positions, each with {', '.join(BOOK_KEYS)}")
    book = []
    for i, row in enumerate(rows):
        missing = [k for k in BOOK_KEYS if not isinstance(row, dict) or k not in row]
        if missing or row["right"] not in ("call", "put"):
            raise ConfigError(f"--positions {path}: position {i + 1} needs {', '.join(BOOK_KEYS)} "
                              f"(right is call or put); missing or wrong: {', '.join(missing) or 'right'}")
        if row.get("side", "long") not in ("long", "short"):
            raise ConfigError(f"--positions {path}: position {i + 1} has side {row['side']!r}; use long or short")
        try:
            book.append(BookedPosition(row["right"] == "call", float(row["strike"]), np.datetime64(row["expiry"], "D"),
                                       float(row["contracts"]), float(row["paid"]), row.get("side") == "short"))
        except (TypeError, ValueError):
            raise ConfigError(f"--positions {path}: position {i + 1} has a non-numeric strike, contracts or paid, "
                              "or an expiry that is not YYYY-MM-DD") from None
    return book


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clstm_ppo.predict", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a .pt file written by python -m clstm_ppo.train")
    parser.add_argument("--data", required=True, help="the bars up to today (a built-in name or a file or folder)")
    parser.add_argument("--positions", type=Path, default=None, help="JSON list of the options held now")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true", help="also print the decision as one JSON object, last")
    args = parser.parse_args(argv)
    book = read_book(args.positions) if args.positions else []
    state = load_checkpoint(args.checkpoint)
    cfg = checkpoint_config(state, args.checkpoint, args.data, args.overrides)
    data = observed_market_data(cfg, Normalizer.from_state_dict(state["normalizer"]))
    model = model_from_checkpoint(state, data, cfg, torch.device("cpu")).eval()
    n = len(data.symbols)
    if book and n > 1:
        raise ConfigError(f"--positions describes one account: pick its underlying with --set data.symbols=[NAME] "
                          f"(the data holds {', '.join(data.symbols)})")
    env = BatchedOptionsEnv(data, "test", cfg.market, cfg.env, n, autoreset=False)  # the last split ends the data
    obs = env.reset(starts=torch.full((n,), env.split_end - 1))
    if book:
        try:
            obs = env.book(book)
        except ValueError as err:
            raise ConfigError(f"--positions {args.positions}: {err}") from None
    with torch.no_grad():
        logits, value, _ = model(obs.market.unsqueeze(0), obs.portfolio.unsqueeze(0), obs.mask.unsqueeze(0),
                                 obs.start.unsqueeze(0), model.initial_state(n, torch.device("cpu")))
    probs = torch.softmax(logits[0].float(), -1)
    decisions = []
    for s, symbol in enumerate(data.symbols):
        action = int(probs[s].argmax())
        valid = obs.mask[s]
        print(f"{symbol} after {data.dates[-1].date()} (close {data.bars['close'][s, -1]:,.2f}): "
              f"{env.actions.describe(action)}, to fill at the next bar's open")
        print(f"  book: {int(env.active[:, s].sum())} position(s), equity ${float(env.equity[s]):,.2f}, "
              f"cash ${float(env.cash[s]):,.2f}; critic's value {float(value[0, s]):+.4f}")
        print(f"  {'action':<22} {'valid':>5} {'probability':>11}")
        for a in range(env.actions.n):
            print(f"  {env.actions.describe(a):<22} {'yes' if valid[a] else 'no':>5} {float(probs[s, a]):>11.4f}")
        decisions.append({"date": str(data.dates[-1].date()), "symbol": symbol, "action": action,
                          "action_name": env.actions.describe(action), "valid": valid.tolist(),
                          "probabilities": probs[s].tolist(),
                          "portfolio": dict(zip(PORTFOLIO_FEATURES, map(float, obs.portfolio[s]), strict=True))})
    if args.json:
        print(strict_json({"checkpoint": args.checkpoint, "decisions": decisions}))
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
