"""The agent's decision for the next bar of a file, from Python: its action and probabilities for
each underlying, for paper trading (``python -m clstm_ppo.predict`` prints it; docs/BACKTEST.md).

    from clstm_ppo.backtest.next_decision import next_decisions
    done = next_decisions("runs/a/best_composite.pt", "my_bars.csv")
    done.decisions[0]["action_name"]

It observes the data's last bar (features normalised with the checkpoint's statistics) with a flat
book of the run's initial cash, or the options held (``read_book``), and gives the action that would
fill at the next bar's open. LSTM 2 starts afresh at that bar, as at an episode's first decision.
The checkpoint's agent.kind (clstm, lstm or mlp) decides the model that is rebuilt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from clstm_ppo.agent.from_checkpoint import checkpoint_config, model_from_checkpoint
from clstm_ppo.backtest.scaled_rules import scaled_rule
from clstm_ppo.config import ConfigError
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv, BookedPosition
from clstm_ppo.market.observed import observed_market_data
from clstm_ppo.run_files.run_state import load_checkpoint

BOOK_KEYS = ("right", "strike", "expiry", "contracts", "paid")


def read_book(path: Path) -> list[BookedPosition]:
    """Positions from a JSON file, or a one-line error saying what is wrong in it."""
    try:
        rows = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(
            f"--positions {path}: cannot read it as JSON ({err}); give a list of positions"
        ) from None
    if not isinstance(rows, list):
        raise ConfigError(
            f"--positions {path}: give a JSON list of positions, each with {', '.join(BOOK_KEYS)}"
        )
    book = []
    for i, row in enumerate(rows):
        missing = [k for k in BOOK_KEYS if not isinstance(row, dict) or k not in row]
        if missing or row["right"] not in ("call", "put"):
            raise ConfigError(
                f"--positions {path}: position {i + 1} needs {', '.join(BOOK_KEYS)} "
                f"(right is call or put); missing or wrong: {', '.join(missing) or 'right'}"
            )
        if row.get("side", "long") not in ("long", "short"):
            raise ConfigError(
                f"--positions {path}: position {i + 1} has side {row['side']!r}; use long or short"
            )
        try:
            book.append(
                BookedPosition(
                    row["right"] == "call",
                    float(row["strike"]),
                    np.datetime64(row["expiry"], "D"),
                    float(row["contracts"]),
                    float(row["paid"]),
                    row.get("side") == "short",
                )
            )
        except (TypeError, ValueError):
            raise ConfigError(
                f"--positions {path}: position {i + 1} has a non-numeric strike, contracts or "
                "paid, or an expiry that is not YYYY-MM-DD"
            ) from None
    return book


@dataclass
class NextDecisions:
    """Each underlying's decision as ``--json`` writes it (date, symbol, action, action_name, valid,
    probabilities, portfolio), and beside it what the command prints: the last close, the book's
    positions, equity and cash, the critic's value, and every action's name."""

    decisions: list[dict]
    closes: list[float]
    positions: list[int]
    equity: list[float]
    cash: list[float]
    values: list[float]
    action_names: list[str]


def next_decisions(
    checkpoint: str | Path,
    data: str,
    overrides: Sequence[str] = (),
    book: Sequence[BookedPosition] = (),
    book_name: str = "the book",
) -> NextDecisions:
    """The greedy decision of ``checkpoint``'s agent after the last bar of ``data`` for each
    underlying, holding ``book`` (one account: the data must hold one underlying); ``book_name``
    names the book in errors."""
    checkpoint = str(checkpoint)
    state = load_checkpoint(checkpoint)
    cfg = checkpoint_config(state, checkpoint, data, list(overrides))
    market = observed_market_data(cfg, Normalizer.from_state_dict(state.normalizer))
    model = model_from_checkpoint(state, market, cfg, torch.device("cpu")).eval()
    n = len(market.symbols)
    if book and n > 1:
        raise ConfigError(
            "--positions describes one account: pick its underlying with --set data.symbols=[NAME] "
            f"(the data holds {', '.join(market.symbols)})"
        )
    env = BatchedOptionsEnv(
        market,
        "test",
        cfg.market,
        cfg.env,
        n,
        autoreset=False,  # the last split ends the data
        scaled=scaled_rule(cfg, market, "cpu"),
    )
    obs = env.reset(starts=torch.full((n,), env.split_end - 1))
    if book:
        try:
            obs = env.book(list(book))
        except ValueError as err:
            raise ConfigError(f"{book_name}: {err}") from None
    with torch.no_grad():
        logits, value, _ = model(
            obs.market.unsqueeze(0),
            obs.portfolio.unsqueeze(0),
            obs.mask.unsqueeze(0),
            obs.start.unsqueeze(0),
            model.initial_state(n, torch.device("cpu")),
        )
    probs = torch.softmax(logits[0].float(), -1)
    names = [env.actions.describe(a) for a in range(env.actions.n)]
    decisions = []
    for s, symbol in enumerate(market.symbols):
        action = int(probs[s].argmax())
        decisions.append(
            {
                "date": str(market.dates[-1].date()),
                "symbol": symbol,
                "action": action,
                "action_name": names[action],
                "valid": obs.mask[s].tolist(),
                "probabilities": probs[s].tolist(),
                "portfolio": dict(
                    zip(PORTFOLIO_FEATURES, map(float, obs.portfolio[s]), strict=True)
                ),
            }
        )
    return NextDecisions(
        decisions,
        [float(c) for c in market.bars["close"][:, -1]],
        [int(env.active[:, s].sum()) for s in range(n)],
        [float(e) for e in env.equity],
        [float(c) for c in env.cash],
        [float(v) for v in value[0]],
        names,
    )
