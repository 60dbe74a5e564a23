"""Stress tests (``evaluate --scenarios GEN.pt``): the agent and every benchmark walked
over N generated paths.

Each path is its own MarketData (``scenarios.market.sample_market_data``): real history up to the
generator's training-split end, then the generated bars as its ``test`` split, normalised with the
agent's own statistics. Every policy takes the same continuous walk as ``evaluate``
(backtest/walk.py) over every path, and the report gives per policy the distribution over paths:

- ``total_return``: quantiles (5, 25, 50, 75, 95%) of each path's total return, close of the first
  generated bar to the last (the first bar's decision fills at the second);
- ``max_drawdown``: quantiles of each path's largest fall from a running peak, as
  a share of the peak;
- ``cvar5``: CVaR(5%) of the paths' total returns, the mean of the worst 5% of paths (at least one
  path); ``daily_cvar5``: quantiles over paths of each path's own CVaR(5%) of daily returns;
- ``p_ruin``: the share of paths on which the account's equity, at any bar's close, fell below the
  env's ``env.ruin_fraction`` of the initial cash (the level at which a training episode ends;
  equity <= 0 when the fraction is 0). The walk itself does not stop at ruin, as in evaluate: the
  equity after it is still reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.metrics import is_ruined

QUANTILES = (0.05, 0.25, 0.50, 0.75, 0.95)
TAIL = 0.05


@dataclass
class StressResult:
    """Every policy's equity over every path: ``equity[name]`` (N, L + 1) dollars, row i
    the walk of path i."""

    equity: dict[str, np.ndarray]
    initial_cash: float
    ruin_fraction: float
    regime: str | None
    generator: str

    @property
    def paths(self) -> int:
        return next(iter(self.equity.values())).shape[0]


def walk_paths(
    markets: list[MarketData],
    walk_all: Callable[[MarketData], dict[str, WalkResult]],
    initial_cash: float,
    ruin_fraction: float,
    regime: str | None = None,
    generator: str = "",
    progress: Callable[[int, int], None] | None = None,
) -> StressResult:
    """``walk_all(market)`` (every policy's walk of one path's ``test`` split) for every path,
    stacked per policy."""
    curves: dict[str, list[np.ndarray]] = {}
    for i, market in enumerate(markets):
        results = walk_all(market)
        for name, result in results.items():
            assert result.equity.shape[0] == 1, "one underlying per generated path"
            curves.setdefault(name, []).append(result.equity[0])
        if progress is not None:
            progress(i + 1, len(markets))
    equity = {name: np.stack(c) for name, c in curves.items()}
    assert all(e.shape[0] == len(markets) for e in equity.values()), "every policy walks every path"
    return StressResult(equity, initial_cash, ruin_fraction, regime, generator)


def tail_mean(x: np.ndarray, tail: float = TAIL) -> float:
    """CVaR: the mean of the lowest ``tail`` share of ``x`` (at least one value)."""
    worst = np.sort(np.asarray(x, dtype=np.float64))[: max(1, int(np.floor(tail * len(x))))]
    return float(worst.mean())


def drawdowns(equity: np.ndarray) -> np.ndarray:
    """(N,) largest fall from a running peak of each row, as a share of the peak."""
    peak = np.maximum.accumulate(equity, axis=1)
    return ((peak - equity) / peak).max(axis=1)


def ruined(equity: np.ndarray, initial_cash: float, ruin_fraction: float) -> np.ndarray:
    """(N,) bool: equity fell below ``ruin_fraction`` of the initial cash at some close (<= 0
    for a fraction 0)."""
    return is_ruined(equity.min(axis=1), initial_cash, ruin_fraction)


def quantiles(x: np.ndarray) -> dict[str, float]:
    return {
        f"q{round(q * 100):02d}": float(v)
        for q, v in zip(QUANTILES, np.quantile(x, QUANTILES), strict=True)
    }


def policy_stats(equity: np.ndarray, initial_cash: float, ruin_fraction: float) -> dict[str, Any]:
    total = equity[:, -1] / equity[:, 0] - 1.0
    daily = equity[:, 1:] / equity[:, :-1] - 1.0
    ruin = ruined(equity, initial_cash, ruin_fraction)
    return {
        "paths": int(len(total)),
        "total_return": quantiles(total),
        "max_drawdown": quantiles(drawdowns(equity)),
        "cvar5": tail_mean(total),
        "daily_cvar5": quantiles(np.array([tail_mean(r) for r in daily])),
        "p_ruin": float(ruin.mean()),
        "ruined_paths": int(ruin.sum()),
        "mean_total_return": float(total.mean()),
    }


def stress_dict(result: StressResult) -> dict[str, Any]:
    """JSON-ready: the settings, the ruin rule, and every policy's statistics."""
    return {
        "generator": result.generator,
        "regime": result.regime,
        "paths": result.paths,
        "bars": int(next(iter(result.equity.values())).shape[1]),
        "ruin": (
            f"equity < {result.ruin_fraction} x initial cash "
            f"({result.initial_cash:,.0f}) at any close"
        )
        if result.ruin_fraction > 0
        else "equity <= 0 at any close",
        "policies": {
            name: policy_stats(e, result.initial_cash, result.ruin_fraction)
            for name, e in result.equity.items()
        },
    }


def format_stress(report: dict[str, Any]) -> str:
    """One row per policy: total-return and drawdown quantiles (%), CVaR(5%) of path
    returns (%), P(ruin)."""
    qs = [f"{round(q * 100)}" for q in QUANTILES]
    head = ["policy", *[f"ret{q}" for q in qs], *[f"mdd{q}" for q in qs], "cvar5", "p_ruin"]
    rows = []
    for name, s in report["policies"].items():
        cells = [
            *[100 * v for v in s["total_return"].values()],
            *[100 * v for v in s["max_drawdown"].values()],
            100 * s["cvar5"],
        ]
        rows.append([name, *[f"{v:.1f}" for v in cells], f"{s['p_ruin']:.3f}"])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(row: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )

    regime = f", regime {report['regime']}" if report["regime"] else ""
    title = (
        f"{report['paths']} generated paths x {report['bars']} bars ({report['bars'] - 1} daily "
        f"returns) from {report['generator']}{regime}; returns and drawdowns in %; "
        f"ruin: {report['ruin']}"
    )
    return "\n".join([title, line(head), *map(line, rows)])


def plot_fan(result: StressResult, path: str | Path) -> None:
    """Equity (as a multiple of the initial cash) quantile bands over the path's bars, one panel per
    policy: 5-95% and 25-75% shaded, the median a line."""
    from matplotlib.figure import Figure  # no pyplot: the Agg canvas on save, no global state

    names = list(result.equity)
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig = Figure(figsize=(3.6 * cols, 2.8 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True, sharey=True)).ravel()
    for ax, name in zip(axes, names, strict=False):
        e = result.equity[name] / result.initial_cash
        q = np.quantile(e, QUANTILES, axis=0)
        x = np.arange(e.shape[1])
        ax.fill_between(x, q[0], q[4], alpha=0.25, color="tab:blue", lw=0, label="5-95%")
        ax.fill_between(x, q[1], q[3], alpha=0.45, color="tab:blue", lw=0, label="25-75%")
        ax.plot(x, q[2], color="black", lw=1.2, label="median")
        ax.axhline(1.0, color="grey", lw=0.6, ls=":")
        ax.set_title(name, fontsize=9)
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    axes[0].legend(fontsize=7, loc="upper left")
    regime = f", regime {result.regime}" if result.regime else ""
    fig.suptitle(f"equity / initial cash over {result.paths} generated paths{regime}", fontsize=10)
    fig.supxlabel("bar of the generated path", fontsize=9)
    fig.savefig(path, dpi=110)
