"""Whether an account can trade what the action space offers: the one line ``data``, ``train``
and ``evaluate`` print when, on most calm bars of a split, a fresh account (the initial cash,
an empty book) cannot hold the smallest order of an option the action space offers
(docs/MARKET.md, "Sizing").

The check is the env's own mask, judged at every bar of the split at once (one copy a bar), split
into the limits it checks, so the line says which orders fail, why, and which setting fixes it.
"""

from __future__ import annotations

import dataclasses
import warnings

import torch

from clstm_ppo.config import EnvConfig, MarketConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.windows import MarketWindows
from clstm_ppo.env.accounting import cash_room
from clstm_ppo.env.options_env import BatchedOptionsEnv
from clstm_ppo.env.quotes import at_rows
from clstm_ppo.env.sizing import order_fits
from clstm_ppo.env.state import flat_row

MOST = 0.5  # an order is untradable when it fails on more than this share of the split's calm bars
SHOWN = 3  # orders named in the line; the rest are counted


def _money(dollars: float) -> str:
    return f"${dollars:,.2f}" if abs(dollars) < 1000 else f"${dollars:,.0f}"


def _fixes(market: MarketConfig, cfg: EnvConfig) -> dict[str, tuple[str, str]]:
    """Each limit: why it fails (its words) and the settings that fix it."""
    unit = "one whole contract" if market.sizing == "whole" else "the smallest order"
    frac = ", or set market.sizing fractional" if market.sizing == "whole" else ""
    return {
        "budget": (
            f"{unit}'s premium or margin is over env.position_frac x equity "
            f"({_money(cfg.position_frac * cfg.initial_cash)})",
            f"raise env.position_frac or env.initial_cash{frac}",
        ),
        "notional": (
            f"{unit}'s notional is over env.max_order_notional x equity "
            f"({_money(cfg.max_order_notional * cfg.initial_cash)})",
            f"raise env.max_order_notional (0: no cap){frac}",
        ),
        "room": (
            f"the cash room (env.initial_cash {_money(cfg.initial_cash)} less the fee reserves) "
            f"cannot pay for {unit}",
            f"raise env.initial_cash{frac}",
        ),
    }


def untradable_orders(
    data: MarketData, split: str, market: MarketConfig, cfg: EnvConfig
) -> dict[str, list[str]]:
    """The option orders a fresh account cannot hold on most calm bars of ``split``, by the
    first limit that fails
    them: {"budget" | "notional" | "room": [order words, ...]} (empty where every order fits)."""
    check = dataclasses.replace(cfg, dtype="float64", episode_length=0, ruin_fraction=0.0)
    bounds = MarketWindows(data, split)  # checks the split's name
    bars = torch.arange(bounds.first_bar, bounds.split_end)
    n_symbols = len(data.symbols)
    with warnings.catch_warnings():
        # the env's own notional-cap warning: this check's line says it, and more
        warnings.simplefilter("ignore", UserWarning)
        env = BatchedOptionsEnv(
            data, split, market, check, len(bars) * n_symbols, autoreset=False, records=False
        )
    env.reset(starts=bars.repeat_interleave(n_symbols))  # copy i: bar i // S of underlying i mod S
    spec, s = env.spec, env.state
    calm = ~spec.turbulent_bar.index_select(0, s.t)
    if not bool(calm.any()):
        return {}
    q, row = spec.quotes, flat_row(spec, s)
    spot = at_rows(q.close_px, row)
    tables = [at_rows(table, row) for table in (q.close_ask, q.close_bid, q.close_short_margin)]
    room = cash_room(spec, s)
    sides = [(False, order_fits(spec, s.equity, room, spot, *tables, selling=False))]
    if env.actions.allow_short:
        sides.append((True, order_fits(spec, s.equity, room, spot, *tables, selling=True)))
    failing: dict[str, list[str]] = {}
    grid = env.actions.grid_size
    for selling, fits in sides:
        for column in range(2 * grid):
            action = 1 + column + (2 * grid if selling else 0)
            shares = {
                name: float((~getattr(fits, name)[calm, column]).double().mean())
                for name in fits._fields
            }
            ok = (fits.budget & fits.room & fits.notional)[calm, column]
            if float((~ok).double().mean()) > MOST:
                reason = max(shares, key=shares.get)  # the limit that fails on the most bars
                failing.setdefault(reason, []).append(env.actions.describe(action))
    return failing


def untradable_line(
    data: MarketData, split: str, market: MarketConfig, cfg: EnvConfig
) -> str | None:
    """One line naming the orders a fresh account cannot hold on most calm bars of ``split``, why,
    and the setting that fixes it; None where every offered order fits."""
    failing = untradable_orders(data, split, market, cfg)
    if not failing:
        return None
    total = 2 * len(market.moneyness) * len(market.expiries_days) * (2 if market.allow_short else 1)
    fixes = _fixes(market, cfg)
    parts = []
    for reason, orders in failing.items():
        names = ", ".join(orders[:SHOWN]) + (
            f" and {len(orders) - SHOWN} more" if len(orders) > SHOWN else ""
        )
        parts.append(f"{names}, as {fixes[reason][0]} ({fixes[reason][1]})")
    count = sum(len(orders) for orders in failing.values())
    sizing = "whole contracts" if market.sizing == "whole" else "fractional contracts"
    return (
        f"warning: on most bars of the {split} split a fresh account cannot hold {count} of the "
        f"{total} option orders the action space offers ({sizing}); the policy's choice "
        "of them becomes hold: " + "; ".join(parts)
    )


def untradable_notice(
    data: MarketData, splits: tuple[str, ...], market: MarketConfig, cfg: EnvConfig
) -> str | None:
    """``untradable_line`` of the first of ``splits`` it speaks for, naming the others where it does
    too: one line for a command that uses several splits."""
    lines = {split: untradable_line(data, split, market, cfg) for split in splits}
    failing = [split for split, line in lines.items() if line]
    if not failing:
        return None
    also = (
        f" (so too on the {' and '.join(failing[1:])} split{'s' if len(failing) > 2 else ''})"
        if len(failing) > 1
        else ""
    )
    return lines[failing[0]] + also
