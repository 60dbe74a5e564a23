"""What a quant reads after a backtest: metrics per underlying and per calendar year, tables
and CSV (the pictures: charts.py).

Every function takes the ``WalkResult`` of each policy, keyed by policy name; all of them walked the
same dates. Returns are per bar, whatever the bars' interval, and every annualised figure uses the
walk's ``clock`` (its bars a year: docs/BACKTEST.md, "Report").
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.data.calendar import BarClock
from clstm_ppo.market import COST_KINDS
from clstm_ppo.metrics import is_ruined
from clstm_ppo.tables import format_table

# a std below this is rounding noise of a flat curve, not risk: its ratios are 0, not 1e16
FLAT = 1e-12
MAIN_KEYS = (
    "total_return",
    "annual_return",
    "annual_vol",
    "sharpe",
    "sharpe_excess",
    "sortino",
    "max_drawdown",
    "calmar",
    "win_rate",
    "trades",
    "open_at_end",
    "turnover",
    "costs",
)
YEAR_KEYS = ("bars", "total_return", "annual_return", "sharpe", "max_drawdown")
PERCENT = {
    "total_return",
    "annual_return",
    "annual_vol",
    "max_drawdown",
    "win_rate",
    "excess_annual",
}
COUNTS = {"bars", "trades", "open_at_end"}


def _ratio(num: float, den: float) -> float:
    """num / den, or 0 when den is rounding noise (a flat curve has no risk to divide by)."""
    return float(num / den) if den > FLAT else 0.0


def excess_returns(equity: np.ndarray, dates: pd.DatetimeIndex, rate: np.ndarray) -> np.ndarray:
    """(n,) each bar's simple return over the T-bill's: the rate known at the last close, over
    the calendar gap."""
    days = np.diff(dates.values).astype("timedelta64[s]").astype(float) / 86_400.0
    return equity[1:] / equity[:-1] - 1.0 - np.expm1(rate[:-1] * days / 365.0)


def curve_metrics(
    equity: np.ndarray, dates: pd.DatetimeIndex, rate: np.ndarray, clock: BarClock
) -> dict[str, float | str]:
    """Return and risk of one equity path of n + 1 closes (n bar returns), rate being each close's
    annual rate, annualised at ``clock.periods_per_year`` bars a year."""
    per_year = clock.periods_per_year
    r = equity[1:] / equity[:-1] - 1.0
    n = len(r)
    excess = excess_returns(equity, dates, rate)
    total = float(equity[-1] / equity[0] - 1.0)
    # an account wiped out (or below zero) has no real compound rate: call it -100% a year
    annual = (1.0 + total) ** (per_year / n) - 1.0 if n and total > -1.0 else (-1.0 if n else 0.0)
    std = float(r.std(ddof=1)) if n > 1 else 0.0
    std_excess = float(excess.std(ddof=1)) if n > 1 else 0.0
    downside = math.sqrt(float(np.mean(np.minimum(r, 0.0) ** 2))) if n else 0.0
    peak = np.maximum.accumulate(equity)
    drawdown = (peak - equity) / peak
    trough = int(np.argmax(drawdown))
    max_dd = float(drawdown[trough])
    # the fall starts at the last close standing at the running peak before the trough
    top = int(np.flatnonzero(equity[: trough + 1] == peak[trough])[-1])
    root = math.sqrt(per_year)
    return {
        "bars": n,
        "total_return": total,
        "annual_return": float(annual),
        "annual_vol": std * root,
        "sharpe": _ratio(float(r.mean()), std) * root if n else 0.0,
        "sharpe_excess": _ratio(float(excess.mean()), std_excess) * root if n else 0.0,
        "sortino": _ratio(float(r.mean()), downside) * root if n else 0.0,
        "max_drawdown": max_dd,
        "max_drawdown_peak": clock.label(dates[top]) if max_dd > 0 else "",
        "max_drawdown_trough": clock.label(dates[trough]) if max_dd > 0 else "",
        "calmar": float(annual / max_dd) if max_dd > 0 else 0.0,
        "min_equity": float(equity.min() / equity[0]),  # the lowest close, as a share of the first
    }


def underlying_metrics(result: WalkResult, s: int) -> dict[str, float | str]:
    """Every metric of underlying s (its index in ``result.symbols``) over the whole walk."""
    equity = result.equity[s]
    out = curve_metrics(equity, result.dates, result.rate[s], result.clock)
    closed = int(result.closed[s])
    years = out["bars"] / result.clock.periods_per_year
    mean_equity = float(equity.mean())
    out |= {
        "win_rate": float(result.wins[s] / closed) if closed else 0.0,
        "trades": closed,
        # The options' own P&L per closed trade (the underlying's P&L is not a
        # trade's); None without trades.
        "profit_per_trade": float(result.option_pnl[s] / closed)
        if closed and result.option_pnl is not None
        else None,
        "open_at_end": int(result.open_at_end[s]),
        "turnover": float(result.traded[s]) / mean_equity / years
        if years and mean_equity > 0
        else 0.0,
        "costs": float(result.costs[s].sum()),
        "ruined": bool(is_ruined(equity.min(), equity[0], result.ruin_fraction)),
    }
    return out | {f"cost_{kind}": float(result.costs[s, k]) for k, kind in enumerate(COST_KINDS)}


def yearly_metrics(result: WalkResult) -> dict[int, dict[str, dict]]:
    """Calendar year -> symbol -> return and risk of that year's bar returns (its first
    from last year's close).

    Trades, wins, turnover and costs are left out: the walk records them only as totals over the
    split. A year with no return (the walk's first bar alone in its year) is left out too.
    """
    years = result.dates[1:].year  # return i ends at bar i + 1, so it belongs to that bar's year
    out: dict[int, dict[str, dict]] = {}
    for year in np.unique(years):
        idx = np.flatnonzero(years == year)
        # the closes those returns span, the year's base included
        bars = slice(int(idx[0]), int(idx[-1]) + 2)
        out[int(year)] = {
            sym: curve_metrics(
                result.equity[s, bars], result.dates[bars], result.rate[s, bars], result.clock
            )
            for s, sym in enumerate(result.symbols)
        }
    return out


def walk_dates(results: dict[str, WalkResult]) -> pd.DatetimeIndex:
    """The walk's dates, after checking every policy walked the same ones (else
    nothing lines up)."""
    first = next(iter(results.values())).dates
    for name, res in results.items():
        if not first.equals(res.dates):
            raise ValueError(
                f"policy {name} walked other dates than {next(iter(results))}; "
                "reports need one walk"
            )
    return first


def walk_clock(results: dict[str, WalkResult]) -> BarClock:
    """The walk's clock (every policy walked one data's bars)."""
    return next(iter(results.values())).clock


def report_dict(results: dict[str, WalkResult]) -> dict:
    """Every metric of every policy, underlying and year, JSON-ready (years as strings,
    JSON's only key type)."""
    dates, clock = walk_dates(results), walk_clock(results)
    return {
        "policies": {
            name: {sym: underlying_metrics(res, s) for s, sym in enumerate(res.symbols)}
            for name, res in results.items()
        },
        "yearly": {
            name: {str(y): m for y, m in yearly_metrics(res).items()}
            for name, res in results.items()
        },
        "dates": [clock.label(dates[0]), clock.label(dates[-1])],
        "clock": clock.as_dict(),
    }


def _cell(key: str, value: float | str) -> str:
    """One table cell, never containing a space, so a row splits back into its fields."""
    if isinstance(value, str):
        return value or "-"
    if key in COUNTS:
        return f"{int(value):,d}"
    if key in PERCENT:
        return f"{100 * value:,.2f}%"
    return f"{value:,.2f}" if key == "costs" or key.startswith("cost_") else f"{value:,.3f}"


def _rows(
    metrics: dict[str, dict[str, dict]], keys: tuple[str, ...], several: bool
) -> list[list[str]]:
    """policy -> symbol -> metrics as table rows, with an underlying column only when
    there are several."""
    return [
        [name, *([sym] if several else []), *(_cell(k, m[k]) for k in keys)]
        for name, by_sym in metrics.items()
        for sym, m in by_sym.items()
    ]


def format_report(results: dict[str, WalkResult], benchmark: str = "buy_and_hold") -> str:
    """The console report: main metrics, costs by kind, then one small table per calendar year."""
    dates = walk_dates(results)
    several = any(len(r.symbols) > 1 for r in results.values())
    names = ["policy", *(["underlying"] if several else [])]
    whole = {
        name: {sym: underlying_metrics(res, s) for s, sym in enumerate(res.symbols)}
        for name, res in results.items()
    }
    keys = MAIN_KEYS
    if benchmark in whole:
        # what a backtest answers: did it beat the benchmark a year, on the same underlying
        keys = (*MAIN_KEYS, "excess_annual")
        for by_sym in whole.values():
            for sym, m in by_sym.items():
                # nan, not a crash, for an underlying the benchmark lacks
                bench = whole[benchmark].get(sym)
                m["excess_annual"] = (
                    m["annual_return"] - bench["annual_return"] if bench else float("nan")
                )
    clock = walk_clock(results)
    lines = [
        f"Backtest {clock.label(dates[0])} to {clock.label(dates[-1])}: {len(dates) - 1} returns "
        f"of {clock.describe()}"
        + (f"; excess_annual against {benchmark}" if benchmark in whole else ""),
        *masked_notes(results),
        format_table([*names, *keys], _rows(whole, keys, several), len(names)),
        "",
        "Costs by kind ($)",
    ]
    cost_keys = ("costs", *(f"cost_{kind}" for kind in COST_KINDS))
    lines.append(format_table([*names, *cost_keys], _rows(whole, cost_keys, several), len(names)))
    yearly = {name: yearly_metrics(res) for name, res in results.items()}
    for year in sorted({y for by_year in yearly.values() for y in by_year}):
        per_year = {name: by_year[year] for name, by_year in yearly.items() if year in by_year}
        lines += [
            "",
            f"{year}",
            format_table([*names, *YEAR_KEYS], _rows(per_year, YEAR_KEYS, several), len(names)),
        ]
    return "\n".join(lines)


def masked_notes(results: dict[str, WalkResult]) -> list[str]:
    """One line for each walk that never traded although it chose orders: the mask turned every one
    into hold (the account could not hold them: docs/MARKET.md, "Sizing")."""
    notes = []
    for name, res in results.items():
        if res.masked is None or res.traded.sum() > 0 or res.masked.sum() == 0:
            continue
        bars = len(res.dates) - 1
        notes.append(
            f"note: {name} never traded: the mask turned the order it chose into hold on "
            f"{int(res.masked.max())} of {bars} bars (no offered order fitted the account; "
            "docs/MARKET.md, 'Sizing')"
        )
    return notes


def _column(policy: str, symbol: str, several: bool) -> str:
    return f"{policy}:{symbol}" if several else policy


def returns_frame(results: dict[str, WalkResult]) -> pd.DataFrame:
    """Bar returns, one row per bar after the first, one column per policy (and underlying when
    several), and last ``tbill`` (``tbill:<symbol>`` when several): the T-bill's return over each
    bar (the rate known at its first close), so a Sharpe ratio over the T-bill can be computed from
    the file alone (scripts/studies/sharpe_test.py)."""
    dates = walk_dates(results)
    cols = {
        _column(name, sym, len(res.symbols) > 1): res.daily_returns[s]
        for name, res in results.items()
        for s, sym in enumerate(res.symbols)
    }
    first = next(iter(results.values()))
    days = np.diff(dates.values).astype("timedelta64[s]").astype(float) / 86_400.0
    for s, sym in enumerate(first.symbols):  # excess_returns' T-bill, each account's own rate
        cols[_column("tbill", sym, len(first.symbols) > 1)] = np.expm1(
            first.rate[s, :-1] * days / 365.0
        )
    return pd.DataFrame(cols, index=pd.DatetimeIndex(dates[1:], name="date"))


def write_returns_csv(results: dict[str, WalkResult], path: str | Path) -> None:
    """The bar returns as CSV (index column ``date``: ISO days, or timestamps for intraday bars),
    for any tool a reader prefers."""
    daily = walk_clock(results).daily
    returns_frame(results).to_csv(path, date_format="%Y-%m-%d" if daily else "%Y-%m-%d %H:%M:%S")


def across_checkpoints(
    reports: list[dict[str, float]],
) -> dict[str, dict[str, float | list[float]]]:
    """Mean, std (ddof 1 from two values on) and each value of every numeric metric all
    checkpoints report."""
    if not reports:
        return {}
    numeric = [
        k
        for k, v in reports[0].items()
        if isinstance(v, (int, float, np.number))
        and not isinstance(v, bool)
        and all(isinstance(r.get(k), (int, float, np.number)) for r in reports)
    ]
    out: dict[str, dict[str, float | list[float]]] = {}
    for key in numeric:
        values = np.array([float(r[key]) for r in reports])
        out[key] = {
            "mean": float(values.mean()),
            "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
            "values": values.tolist(),
        }
    return out
