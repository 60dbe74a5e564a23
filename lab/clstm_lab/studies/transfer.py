"""A checkpoint on another underlying: its greedy walk over each Dow stock and over the S&P 500 at five times its
prices, beside buy-and-hold and best_rule on the same bars (docs/BACKTEST.md, "Another underlying").

Each row is one underlying: the agent's option trades (closed and still open), its Sharpe ratio over the T-bill,
buy-and-hold's and best_rule's (picked on that underlying's own validation years), with the commit and machine
that measured it (``tables.provenance``). A row of prices times k also says how far the walk is the agent's walk at
the prices as they are: the share of bars with the same greedy action and the largest difference of a day's return.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from clstm_ppo.backtest.checkpoints import backtest_checkpoints, load_agents
from clstm_ppo.backtest.policies import agent_logits
from clstm_ppo.backtest.report import underlying_metrics
from clstm_ppo.backtest.scaled_rules import scaled_rule
from clstm_ppo.backtest.walk import walk
from clstm_ppo.config import Config
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.tables import provenance

PRICES = ("open", "high", "low", "close")
# (label, data source, price multiple): the S&P 500 as it traded (the agent's own market, for comparison), every
# Dow stock as it traded, and the S&P 500 as an index at 5x its level.
UNDERLYINGS = (("sp500", "sp500", 1.0), ("dow", "dow", 1.0), ("sp500 x5", "sp500", 5.0))


def prices_times(data: MarketData, k: float) -> MarketData:
    """``data`` with every open, high, low and close x ``k`` and the share volume / ``k`` (a k-to-1 reverse split:
    the same returns, features and dollar volume)."""
    bars = {**data.bars, **{name: data.bars[name] * k for name in PRICES}}
    if "volume" in bars:
        bars["volume"] = data.bars["volume"] / k
    return dataclasses.replace(data, bars=bars)


def greedy_actions(model: torch.nn.Module, cfg: Config, data: MarketData, split: str,
                   device: torch.device) -> tuple[np.ndarray, np.ndarray]:
    """The agent's greedy action at every bar of its walk over ``split`` of ``data`` and the walk's daily returns:
    (bars x underlyings) each."""
    chosen: list[torch.Tensor] = []

    def act(obs, state):
        logits, state = agent_logits(model, obs, state)
        chosen.append(logits.argmax(-1))
        return chosen[-1], state
    with torch.no_grad():
        result = walk("agent", act, model.initial_state(len(data.symbols), device), data, split, cfg, device,
                      scaled_rule(cfg, data, device))
    return torch.stack(chosen).cpu().numpy(), result.daily_returns


def same_walk(agent: tuple, multiple: float, split: str, device: torch.device) -> dict[str, float]:
    """How far the agent's walk over prices x ``multiple`` is its walk over the prices as they are: the share of bars
    where it chose the same action, and the largest difference of a day's return (what the dollar amounts, fees per
    contract and the tick grid, change)."""
    cfg, data, model = agent
    actions, returns = greedy_actions(model, cfg, data, split, device)
    scaled_actions, scaled_returns = greedy_actions(model, cfg, prices_times(data, multiple), split, device)
    return {"same_actions": float((actions == scaled_actions).mean()),
            "max_daily_return_diff": float(np.abs(returns - scaled_returns).max())}


def transfer_rows(checkpoint: str, split: str = "test", device: str = "auto",
                  underlyings: tuple[tuple[str, str, float], ...] = UNDERLYINGS) -> list[dict[str, Any]]:
    """One row per underlying of ``underlyings`` for ``checkpoint`` walked over ``split``."""
    where = provenance()
    rows = []
    for label, source, multiple in underlyings:
        agents, picked = load_agents([checkpoint], data=source, device=device)
        same = same_walk(agents[0], multiple, split, picked) if multiple != 1 else {}
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
                "same_actions": same.get("same_actions", float("nan")),
                "max_daily_return_diff": same.get("max_daily_return_diff", float("nan")),
                "best_rule_name": done.rule.name, "split": split, "checkpoint": checkpoint,
                "untradable": done.untradable or "", "commit": where["commit"], "machine": where["machine"],
                "date": where["date"],
            })
    return rows


def transfer_table(rows: list[dict[str, Any]]) -> str:
    """BACKTEST's "Another underlying" table from transfer rows: the S&P 500 at each price multiple, one line, and
    the Dow stocks summarised (medians and ranges, how many the agent leads buy-and-hold on)."""
    number = lambda row, key: float(row[key])  # noqa: E731
    lines = ["| underlying | trades | agent's Sharpe | buy-and-hold | best_rule | the walk at x 1 |",
             "|---|---|---|---|---|---|"]
    for row in (r for r in rows if r["source"].startswith("sp500")):
        same = number(row, "same_actions")
        walk = "—" if same != same else (f"same action on {same:.0%} of bars, a day's return at most "
                                         f"{number(row, 'max_daily_return_diff'):.4%} apart")
        lines.append(f"| {row['underlying']} | {row['trades']} | {number(row, 'sharpe_excess'):.2f} | "
                     f"{number(row, 'buy_and_hold'):.2f} | {number(row, 'best_rule'):.2f} | {walk} |")
    dow = [r for r in rows if r["source"] == "dow"]
    if dow:
        def spread(key: str) -> str:
            values = np.array([number(r, key) for r in dow])
            return f"{np.median(values):.2f} ({values.min():.2f}..{values.max():.2f})"
        ahead = sum(number(r, "sharpe_excess") > number(r, "buy_and_hold") for r in dow)
        trades = sorted({int(r["trades"]) for r in dow})
        counts = str(trades[0]) if len(trades) == 1 else f"{trades[0]}-{trades[-1]}"
        lines.append(f"| {len(dow)} Dow stocks (median, range) | {counts} | "
                     f"{spread('sharpe_excess')} | {spread('buy_and_hold')} | {spread('best_rule')} | ahead of "
                     f"buy-and-hold on {ahead} of {len(dow)} |")
    return "\n".join(lines)
