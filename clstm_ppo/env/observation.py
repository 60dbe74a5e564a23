"""What the copies observe: the portfolio features, the action mask, and the types that carry them.
Read-only: nothing here changes the env's state."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from clstm_ppo.data.windows import MarketWindows
from clstm_ppo.env.accounting import cash_room, free_cover
from clstm_ppo.env.quotes import at_rows
from clstm_ppo.env.sizing import order_fits, smallest, units
from clstm_ppo.env.state import EnvSpec, EnvState, flat_row
from clstm_ppo.market.costs import share_price_with_fees
from clstm_ppo.market.flags import as_float

PORTFOLIO_FEATURES = (
    "cash_share",
    "open_share",
    "net_delta",
    "net_gamma",
    "net_vega",
    "net_theta",
    "unrealized_pnl",
    "days_to_expiry",
    "turbulent",
    "equity_change",
    "progress",
    "margin_share",
    "stock_share",
)


class Observation:
    """What N copies observe at bar t.

    ``market`` is gathered from ``windows`` on first access (then kept): the windows come from the
    fixed feature table, so reading them later gives the same values, and a consumer that works from
    ``row`` (the trainer's per-bar LSTM 1 codes) never pays for N x TW x F copies.
    """

    __slots__ = ("portfolio", "mask", "row", "start", "windows", "_market")

    def __init__(
        self, portfolio: Tensor, mask: Tensor, row: Tensor, start: Tensor, windows: MarketWindows
    ):
        self.portfolio = portfolio  # (N, len(PORTFOLIO_FEATURES))
        self.mask = mask  # (N, A) bool: which actions are valid at t (read-only: the env keeps it)
        # (N,) flat index sym * T + t of bar t: storage keeps this instead of the window
        self.row = row
        self.start = start  # (N,) bool: this observation begins an episode
        self.windows, self._market = windows, None  # the feature table the rows index

    @property
    def market(self) -> Tensor:
        """(N, TW, F) normalised features of the last TW bars up to t."""
        if self._market is None:
            self._market = self.windows.gather(self.row)
        return self._market

    def copies(self, first: int, stop: int) -> Observation:
        """What copies ``first``..``stop - 1`` observe (views, not copies of the tensors)."""
        part = Observation(
            self.portfolio[first:stop],
            self.mask[first:stop],
            self.row[first:stop],
            self.start[first:stop],
            self.windows,
        )
        part._market = None if self._market is None else self._market[first:stop]
        return part


class BookedPosition(NamedTuple):
    """An option a user already holds (``BatchedOptionsEnv.book``)."""

    is_call: bool
    strike: float
    expiry: np.datetime64  # the calendar day it is listed to expire
    contracts: float
    paid: float  # dollars it cost (a long) or brought in (a short), fees included
    short: bool = False  # sold to open


class StepResult(NamedTuple):
    obs: Observation  # after an auto-reset, the new episode's first observation
    reward: Tensor  # (N,)
    terminated: Tensor  # (N,) bool: ruin
    truncated: Tensor  # (N,) bool: episode length or split end reached
    # statistics of the episodes that ended at this step, else None
    episodes: dict[str, np.ndarray] | None


def portfolio_features(spec: EnvSpec, s: EnvState) -> Tensor:
    """(N, len(PORTFOLIO_FEATURES)) float32: the book at t's close, scaled by equity."""
    equity = s.equity.clamp_min(1e-9)
    open_count = s.active.sum(0).to(spec.dtype)
    days_left = s.expiry_time - spec.quotes.close_time.index_select(0, s.t)
    dte = (days_left * as_float(s.active, spec.dtype)).sum(0) / open_count.clamp_min(1)
    span = (s.t_end - s.t_start).clamp_min(1).to(spec.dtype)
    spot = at_rows(spec.quotes.close_px, flat_row(spec, s))
    return torch.stack(
        [
            s.cash / equity,
            open_count / spec.cfg.max_positions,
            *(s.greeks / equity),
            (s.mark - s.entry_cost).sum(0) / equity,  # unrealised P&L (empty slots hold neither)
            dte / max(spec.market.expiries_days),
            spec.turbulent_bar.index_select(0, s.t).to(spec.dtype),
            s.equity / spec.cfg.initial_cash - 1.0,
            (s.t - s.t_start).to(spec.dtype) / span,
            s.margin / equity,
            s.shares * spot / equity,
        ],
        dim=-1,
    ).to(torch.float32)


def valid_actions(spec: EnvSpec, s: EnvState) -> Tensor:
    """(N, A) bool: the actions valid at t, judged at t's close (the fill at t+1 may
    still be rejected)."""
    a, g, q, row = spec.actions, spec.actions.grid_size, spec.quotes, flat_row(spec, s)
    n_open = s.active.sum(0)
    turbulent = spec.turbulent_bar.index_select(0, s.t)
    spot = at_rows(q.close_px, row)
    mask = torch.empty(spec.num_envs, a.n, dtype=torch.bool, device=spec.device)
    mask[:, a.hold] = True
    holding = n_open > 0
    mask[:, a.close_all] = holding | (s.shares > 0)
    mask[:, a.close_worst :] = holding.unsqueeze(-1)  # close worst and best: options only
    can_open = ((n_open < spec.cfg.max_positions) & ~turbulent).unsqueeze(-1)
    room = cash_room(spec, s)
    # The smallest order (one contract, or fractional dust) within position_frac of equity, the cash
    # room and env.max_order_notional; a covered call needs only free shares.
    ask, bid, margin = (
        at_rows(table, row) for table in (q.close_ask, q.close_bid, q.close_short_margin)
    )
    buys = order_fits(spec, s.equity, room, spot, ask, bid, margin, selling=False)
    mask[:, 1 : 1 + 2 * g] = buys.budget & buys.room & buys.notional & can_open
    if a.allow_short:
        sales = order_fits(spec, s.equity, room, spot, ask, bid, margin, selling=True)
        naked = sales.budget & sales.room & sales.notional
        called = (s.cash < s.margin) & (s.margin > 0)  # a margin call opens nothing, covered or not
        least_cover = smallest(spec, s.equity, spot * spec.market.multiplier)
        naked[:, :g] |= ((free_cover(spec, s) >= least_cover) & ~called).unsqueeze(-1)
        mask[:, 1 + 2 * g : 1 + 4 * g] = naked & can_open
    if a.stock_targets:
        # a target that changes the holding: lower always, higher when calm and one share fits
        wanted = units(
            spec, spec.stock_targets * s.equity.clamp_min(0).unsqueeze(-1) / spot.unsqueeze(-1)
        )
        held = s.shares.unsqueeze(-1)
        # a change smaller than dust is no change
        least = smallest(spec, s.equity, spot).unsqueeze(-1)
        one_share = share_price_with_fees(spot, spec.market.costs).unsqueeze(-1) * least
        can_buy = ~turbulent.unsqueeze(-1) & (room.unsqueeze(-1) >= one_share)
        mask[:, a.first_stock : a.close_all] = (wanted <= held - least) | (
            (wanted >= held + least) & can_buy
        )
    return mask
