"""A checkpoint on another underlying: its greedy walk over each Dow stock and over the S&P 500 at five times its
prices, beside buy-and-hold and best_rule on the same bars (docs/BACKTEST.md, "Another underlying").

Each row is one underlying: the agent's option trades (closed and still open), its Sharpe ratio over the T-bill,
buy-and-hold's and best_rule's (picked on that underlying's own validation years), with the commit and machine
that measured it (``tables.provenance``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from clstm_ppo.backtest.checkpoints import backtest_checkpoints, load_agents
from clstm_ppo.backtest.report import underlying_metrics
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.tables import provenance

PRICES = ("open", "high", "low", "close")
# (label, data source, price multiple): every Dow stock as it traded, the S&P 500 as an index at 5x its level.
UNDERLYINGS = (("dow", "dow", 1.0), ("sp500 x5", "sp500", 5.0))


def prices_times(data: MarketData, k: float) -> MarketData:
    """``data`` with every open, high, low and close x ``k`` and the share volume / ``k`` (a k-to-1 reverse split:
    the same returns, features and dollar volume)."""
    bars = {**data.bars, **{name: data.bars[name] * k for name in PRICES}}
    if "volume" in bars:
        bars["volume"] = data.bars["volume"] / k
    return dataclasses.replace(data, bars=bars)


def transfer_rows(checkpoint: str, split: str = "test", device: str = "auto",
                  underlyings: tuple[tuple[str, str, float], ...] = UNDERLYINGS) -> list[dict[str, Any]]:
    """One row per underlying of ``underlyings`` for ``checkpoint`` walked over ``split``."""
    where = provenance()
    rows = []
    for label, source, multiple in underlyings:
        agents, _ = load_agents([checkpoint], data=source, device=device)
        agents = [(cfg, prices_times(data, multiple), model) for cfg, data, model in agents]
        done = backtest_checkpoints([checkpoint], split=split, agents=agents)
        walks = done.results
        for s, symbol in enumerate(walks["agent"].symbols):
            agent = walks["agent"]
            rows.append({
                "underlying": symbol if multiple == 1 else f"{symbol} x{multiple:g}", "source": label,
                "trades": int(agent.closed[s] + agent.open_at_end[s]),
                "sharpe_excess": underlying_metrics(agent, s)["sharpe_excess"],
                "buy_and_hold": underlying_metrics(walks["buy_and_hold"], s)["sharpe_excess"],
                "best_rule": underlying_metrics(walks["best_rule"], s)["sharpe_excess"],
                "best_rule_name": done.rule.name, "split": split, "checkpoint": checkpoint,
                "untradable": done.untradable or "", "commit": where["commit"], "machine": where["machine"],
                "date": where["date"],
            })
    return rows
