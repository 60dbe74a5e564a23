"""One out-of-sample walk from walk-forward folds (docs/BACKTEST.md): each fold's walk over its own
test block, laid end to end, every fold's model trained and fitted on years before its block only.

Each fold's walk starts in cash at its first bar's close (its first decision fills at the next bar),
so the stitched account carries the previous fold's last equity through that first bar: one flat day
per later fold, and no bar is left out or counted twice.
"""

from __future__ import annotations

import numpy as np

from clstm_ppo.backtest.result import WalkResult


def stitch(walks: list[WalkResult]) -> WalkResult:
    """``walks`` (one policy, one per fold, in date order, the same underlyings) as
    one continuous walk."""
    first = walks[0]
    for before, after in zip(walks[:-1], walks[1:], strict=True):
        if after.symbols != first.symbols:
            raise ValueError(
                f"fold walks hold different underlyings: {first.symbols} vs {after.symbols}"
            )
        if after.dates[0] <= before.dates[-1]:
            raise ValueError(
                f"fold walks overlap or are out of order: one ends {before.dates[-1].date()}, "
                f"the next starts {after.dates[0].date()}"
            )
    equity, rate = [first.equity], [first.rate]
    for walk in walks[1:]:
        # this fold's cash start -> the account so far
        scale = equity[-1][:, -1:] / walk.equity[:, :1]
        equity.append(walk.equity * scale)
        rate.append(walk.rate)
    # counts add up
    total = lambda field: np.sum([getattr(w, field) for w in walks], axis=0)  # noqa: E731
    option_pnl = None if any(w.option_pnl is None for w in walks) else total("option_pnl")
    dates = first.dates.append([w.dates for w in walks[1:]])
    return WalkResult(
        policy=first.policy,
        symbols=first.symbols,
        dates=dates,
        equity=np.concatenate(equity, axis=1),
        rate=np.concatenate(rate, axis=1),
        closed=total("closed"),
        wins=total("wins"),
        open_at_end=walks[-1].open_at_end,
        traded=total("traded"),
        costs=total("costs"),
        ruin_fraction=first.ruin_fraction,
        clock=first.clock,
        option_pnl=option_pnl,
    )
