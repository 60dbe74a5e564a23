"""Evaluation metrics (docs/BACKTEST.md) from the env's per-episode statistics."""

from __future__ import annotations

import numpy as np

from clstm_ppo.env.episodes import ragged
from clstm_ppo.env.state import EPISODE_SUMS
from clstm_ppo.market import COST_KINDS

# Each gets its own best_<metric>.pt; composite_smoothed is the mean composite
# of the last few (selection.py).
COST_FIELDS = tuple(f"cost_{kind}" for kind in COST_KINDS)  # $ per episode, one metric per kind


def sharpe(returns: np.ndarray, periods_per_year: float) -> float:
    """Annualised Sharpe of per-bar equity returns (rf = 0) at ``periods_per_year`` bars a year (the
    data's clock, ``MarketData.periods_per_year``); 0 for a flat curve."""
    std = returns.std(ddof=1) if len(returns) > 1 else 0.0
    return float(np.sqrt(periods_per_year) * returns.mean() / std) if std > 0 else 0.0


def sortino(returns: np.ndarray, periods_per_year: float) -> float:
    downside = np.minimum(returns, 0.0)
    dd = np.sqrt((downside**2).mean()) if len(returns) else 0.0
    return float(np.sqrt(periods_per_year) * returns.mean() / dd) if dd > 0 else 0.0


def max_drawdown(equity: np.ndarray) -> float:
    """Largest fall from a running peak, as a share of that peak (0.25 = 25%)."""
    peak = np.maximum.accumulate(equity)
    return float(((peak - equity) / peak).max()) if len(equity) else 0.0


def is_ruined(
    lowest_equity: np.ndarray | float, initial_cash: float, ruin_fraction: float
) -> np.ndarray | bool:
    """Whether an account whose lowest close was ``lowest_equity`` was ruined by the env's rule:
    below ``ruin_fraction`` of the initial cash (where a training episode ends), or at or below 0
    for a fraction 0."""
    return lowest_equity < ruin_fraction * initial_cash if ruin_fraction > 0 else lowest_equity <= 0


def composite_score(win_rate: float, profit_rate: float, return_pct: float) -> float:
    """The seed system's score: mean of win rate, profit rate and clip((return%
    + 20) / 40, 0, 1)."""
    return (win_rate + profit_rate + float(np.clip((return_pct + 20.0) / 40.0, 0.0, 1.0))) / 3.0


def episode_metrics(episodes: dict[str, np.ndarray], periods_per_year: float) -> dict[str, float]:
    """Pooled metrics over finished episodes (the dict the env returns, possibly concatenated),
    their Sharpe and Sortino ratios annualised at the data's ``periods_per_year``."""
    curves = [np.asarray(c, dtype=np.float64) for c in episodes["equity_curve"]]
    per_episode_sharpe = [
        sharpe(np.diff(c) / c[:-1], periods_per_year) for c in curves if len(c) > 1
    ]
    per_episode_sortino = [
        sortino(np.diff(c) / c[:-1], periods_per_year) for c in curves if len(c) > 1
    ]
    closed, wins = float(np.sum(episodes["closed"])), float(np.sum(episodes["wins"]))
    win_rate = wins / closed if closed > 0 else 0.0
    profit_rate = float(np.mean(episodes["return"] > 0))
    return_pct = float(np.mean(episodes["return_pct"]))
    costs = np.asarray(
        np.stack(episodes["costs"]) if len(episodes["costs"]) else np.zeros((0, len(COST_KINDS)))
    )
    out = {
        "episodes": float(len(curves)),
        "reward": float(np.mean(episodes["reward"])),
        "return": float(np.mean(episodes["return"])),
        "return_pct": return_pct,
        "sharpe": float(np.mean(per_episode_sharpe)) if per_episode_sharpe else 0.0,
        "sortino": float(np.mean(per_episode_sortino)) if per_episode_sortino else 0.0,
        "max_drawdown": float(np.mean([max_drawdown(c) for c in curves])),
        "closed": closed / len(curves),
        "open": float(np.mean(episodes["open"])),
        "steps": float(np.mean(episodes["steps"])),
        "win_rate": win_rate,
        "profit_rate": profit_rate,
        "composite": composite_score(win_rate, profit_rate, return_pct),
        "costs": float(costs.sum(axis=1).mean()) if len(costs) else 0.0,
    }
    for i, key in enumerate(COST_FIELDS):
        out[key] = float(costs[:, i].mean()) if len(costs) else 0.0
    return out


def concat_episodes(chunks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    chunks = [c for c in chunks if c is not None]
    if not chunks:
        return {}
    out = {}
    for key in chunks[0]:
        if key == "equity_curve":
            out[key] = ragged([c for chunk in chunks for c in chunk[key]])
        else:
            out[key] = np.concatenate([chunk[key] for chunk in chunks])
    return out


def episode_line(episode: int, total: int | None, m: dict[str, float], suffix: str = "") -> str:
    """The seed documents' console line, e.g. ``Episode 100/1000 - Reward: 45.23, Return: $234.56,
    Win Rate: 65.0% (20 closed, 3 open), Steps: 234``"""
    of = f"/{total}" if total else ""
    line = (
        f"Episode {episode}{of} - Reward: {m['reward']:.2f}, Return: ${m['return']:,.2f}, "
        f"Win Rate: {m['win_rate'] * 100:.1f}% ({m['closed']:.0f} closed, {m['open']:.0f} open), "
        f"Steps: {m['steps']:.0f}"
    )
    return line + (f" | {suffix}" if suffix else "")


# what the env sums on the device (``env.episodes.add_finished``), in this order
SUMMARY_FIELDS = EPISODE_SUMS


def full_length(episodes: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The records of ``episodes`` that ran their full length (all of them where the records
    carry no ``full``)."""
    if not episodes or "full" not in episodes:
        return episodes
    keep = np.asarray(episodes["full"], dtype=bool)
    return {k: v[keep] for k, v in episodes.items()} if keep.any() else {}


def episode_sums(episodes: dict[str, np.ndarray]) -> np.ndarray:
    """Sums over finished full-length episodes, in a fixed-size vector that ranks can all-reduce.

    The first episodes a staggered env cuts short (``env.stagger_starts``) are left out, count
    included: their returns cover fewer bars, and averaging them in would drag the first updates'
    returns, trades and steps towards zero. So the training log's episode count (and
    ``train.num_episodes``) counts full-length episodes.
    """
    episodes = full_length(episodes)
    if not episodes:
        return np.zeros(len(SUMMARY_FIELDS))
    costs = np.stack(episodes["costs"]).sum(axis=0)  # $ per kind over the episodes
    return np.array(
        [
            len(episodes["return"]),
            episodes["reward"].sum(),
            episodes["return"].sum(),
            episodes["return_pct"].sum(),
            episodes["closed"].sum(),
            episodes["wins"].sum(),
            episodes["open"].sum(),
            episodes["steps"].sum(),
            (episodes["return"] > 0).sum(),
            *costs,
        ],
        dtype=np.float64,
    )


def sums_to_metrics(sums: np.ndarray) -> dict[str, float]:
    """Per-episode means (costs by kind included), win rate and profit rate from (all ranks')
    summed statistics."""
    s = dict(zip(SUMMARY_FIELDS, map(float, sums), strict=True))
    n = max(s["episodes"], 1.0)
    win_rate = s["wins"] / s["closed"] if s["closed"] > 0 else 0.0
    profit_rate = s["profitable"] / n
    return_pct = s["return_pct"] / n
    per_episode = {
        k: s[k] / n for k in ("reward", "return", "closed", "open", "steps", *COST_FIELDS)
    }
    return {
        "episodes": s["episodes"],
        **per_episode,
        "return_pct": return_pct,
        "win_rate": win_rate,
        "profit_rate": profit_rate,
        "composite": composite_score(win_rate, profit_rate, return_pct),
        "costs": sum(per_episode[k] for k in COST_FIELDS),
    }
