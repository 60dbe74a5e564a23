"""A backtest's pictures: the equity and drawdown chart (``evaluate --plot``) and quantstats'
HTML tearsheet (``--tearsheet``), each of every policy walked over one split (docs/BACKTEST.md)."""

from __future__ import annotations

import importlib.util
import logging
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from clstm_ppo.backtest.report import walk_clock, walk_dates
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.config import ConfigError, first_line

NO_QUANTSTATS = (
    "--tearsheet needs the optional report extra: pip install 'clstm_ppo[report]' (quantstats)"
)


def _account(res: WalkResult) -> np.ndarray:
    """The copies' equity summed: one account that split its cash equally over the underlyings."""
    return res.equity.sum(axis=0)


def plot_equity(
    results: dict[str, WalkResult], path: str | Path, benchmark: str = "buy_and_hold"
) -> None:
    """Equity (above) and drawdown (below) of every policy on a date axis; the
    benchmark in thick black."""
    # no pyplot: no display, no global backend, the Agg canvas on save
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    dates = walk_dates(results).values
    fig = Figure(figsize=(11, 7), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    for name, res in results.items():
        equity = _account(res)
        drawdown = equity / np.maximum.accumulate(equity) - 1.0
        style = (
            dict(color="black", lw=2.2, ls="--", zorder=3) if name == benchmark else dict(lw=1.3)
        )
        (line,) = top.plot(dates, equity, label=name, **style)
        bottom.plot(
            dates, 100 * drawdown, color=line.get_color(), lw=style["lw"], ls=style.get("ls", "-")
        )
    symbols = next(iter(results.values())).symbols
    top.set_ylabel(
        "equity ($)" + (f", {len(symbols)} underlyings summed" if len(symbols) > 1 else "")
    )
    top.legend(loc="best")
    top.grid(alpha=0.3)
    bottom.set_ylabel("drawdown (%)")
    bottom.grid(alpha=0.3)
    locator = AutoDateLocator()
    bottom.xaxis.set_major_locator(locator)
    bottom.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    first, last = (pd.Timestamp(d).date() for d in (dates[0], dates[-1]))
    top.set_title(f"{', '.join(symbols)}: {first} to {last}")
    fig.savefig(path, dpi=120)


def check_tearsheet() -> None:
    """Fail in one line before a long walk, not after it, when quantstats (an optional
    extra) is missing."""
    if importlib.util.find_spec("quantstats") is None:
        raise ConfigError(NO_QUANTSTATS)


def write_tearsheet(
    results: dict[str, WalkResult],
    path: str | Path,
    policy: str = "agent",
    benchmark: str = "buy_and_hold",
) -> None:
    """quantstats' HTML tearsheet of ``policy`` against ``benchmark`` (both as the summed
    account of every copy)."""
    for name in (policy, benchmark):
        if name not in results:
            raise ConfigError(
                f"--tearsheet: no policy '{name}' was walked (walked: {', '.join(results)})"
            )
    dates = pd.DatetimeIndex(walk_dates(results)[1:], name="date")

    def returns(name: str) -> pd.Series:
        equity = _account(results[name])
        return pd.Series(equity[1:] / equity[:-1] - 1.0, index=dates, name=name)

    import matplotlib

    font_log = logging.getLogger("matplotlib.font_manager")
    level = font_log.level
    # quantstats restyles matplotlib globally on import (seaborn theme, Arial): keep that
    # inside this call, and mute its hundreds of "Arial not found" lines and tick warnings,
    # which say nothing about the backtest
    with matplotlib.rc_context(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        font_log.setLevel(logging.ERROR)
        try:
            try:
                import quantstats
            except ImportError as err:
                missing = getattr(err, "name", None) == "quantstats" or "quantstats" in str(err)
                why = NO_QUANTSTATS if missing else f"quantstats does not import: {first_line(err)}"
                raise ConfigError(why) from None
            # the benchmark goes in as a Series, never a ticker: a ticker makes
            # quantstats download it from Yahoo
            quantstats.reports.html(
                returns(policy),
                benchmark=returns(benchmark),
                rf=0.0,
                output=str(path),
                title=f"{policy} vs {benchmark}",
                strategy_title=policy,
                benchmark_title=benchmark,
                periods_per_year=round(walk_clock(results).periods_per_year),
                compounded=True,
            )
        finally:
            font_log.setLevel(level)
