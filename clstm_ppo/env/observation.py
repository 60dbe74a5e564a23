"""What the copies observe and report: the portfolio features, the action mask, the per-episode statistics,
and the types that carry them. Read-only: nothing here changes the env's state."""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from torch import Tensor

from clstm_ppo.data.windows import MarketWindows
from clstm_ppo.env.accounting import cash_room, free_cover
from clstm_ppo.env.quotes import at_rows
from clstm_ppo.market.costs import share_price_with_fees
from clstm_ppo.market.flags import as_float

if TYPE_CHECKING:
    from clstm_ppo.env.options_env import BatchedOptionsEnv

PORTFOLIO_FEATURES = (
    "cash_share", "open_share", "net_delta", "net_gamma", "net_vega", "net_theta",
    "unrealized_pnl", "days_to_expiry", "turbulent", "equity_change", "progress", "margin_share", "stock_share",
)
# Per copy, summed over its episode; margin_calls counts the bars whose close left the short margin uncovered.
STAT_NAMES = ("reward", "closed", "wins", "invalid", "rejected", "traded", "margin_calls")


class Observation:
    """What N copies observe at bar t.

    ``market`` is gathered from ``windows`` on first access (then kept): the windows come from the fixed
    feature table, so reading them later gives the same values, and a consumer that works from ``row``
    (the trainer's per-bar LSTM 1 codes) never pays for N x TW x F copies.
    """

    __slots__ = ("portfolio", "mask", "row", "start", "windows", "_market")

    def __init__(self, portfolio: Tensor, mask: Tensor, row: Tensor, start: Tensor, windows: MarketWindows):
        self.portfolio = portfolio  # (N, len(PORTFOLIO_FEATURES))
        self.mask = mask  # (N, A) bool: which actions are valid at t (read-only: the env keeps it)
        self.row = row  # (N,) flat index sym * T + t of bar t: storage keeps this instead of the window
        self.start = start  # (N,) bool: this observation begins an episode
        self.windows, self._market = windows, None  # the feature table the rows index

    @property
    def market(self) -> Tensor:
        """(N, TW, F) normalised features of the last TW bars up to t."""
        if self._market is None:
            self._market = self.windows.gather(self.row)
        return self._market


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
    episodes: dict[str, np.ndarray] | None  # statistics of the episodes that ended at this step, else None


def portfolio_features(env: BatchedOptionsEnv) -> Tensor:
    """(N, len(PORTFOLIO_FEATURES)) float32: the book at t's close, scaled by equity."""
    equity = env.equity.clamp_min(1e-9)
    open_count = env.active.sum(0).to(env.dtype)
    days_left = env.expiry_time - env.quotes.close_time.index_select(0, env.t)
    dte = (days_left * as_float(env.active, env.dtype)).sum(0) / open_count.clamp_min(1)
    span = (env.t_end - env.t_start).clamp_min(1).to(env.dtype)
    spot = at_rows(env.quotes.close_px, env.row)
    return torch.stack([
        env.cash / equity,
        open_count / env.cfg.max_positions,
        *(env.greeks / equity),
        (env.mark - env.entry_cost).sum(0) / equity,  # unrealised P&L (empty slots hold neither)
        dte / max(env.market_cfg.expiries_days),
        env.turbulent_bar.index_select(0, env.t).to(env.dtype),
        env.equity / env.cfg.initial_cash - 1.0,
        (env.t - env.t_start).to(env.dtype) / span,
        env.margin / equity,
        env.shares * spot / equity,
    ], dim=-1).to(torch.float32)


def valid_actions(env: BatchedOptionsEnv) -> Tensor:
    """(N, A) bool: the actions valid at t, judged at t's close (the fill at t+1 may still be rejected)."""
    a, g, q, row = env.actions, env.actions.grid_size, env.quotes, env.row
    n_open = env.active.sum(0)
    turbulent = env.turbulent_bar.index_select(0, env.t)
    spot = at_rows(q.close_px, row)
    mask = torch.empty(env.num_envs, a.n, dtype=torch.bool, device=env.device)
    mask[:, a.hold] = True
    holding = n_open > 0
    mask[:, a.close_all] = holding | (env.shares > 0)
    mask[:, a.close_worst:] = holding.unsqueeze(-1)  # close worst and best: options only
    can_open = ((n_open < env.cfg.max_positions) & ~turbulent).unsqueeze(-1)
    room, budget = cash_room(env), env.cfg.position_frac * env.equity
    one = at_rows(q.close_cost, row)  # (N, 2G): one contract with its buying and closing fees
    mask[:, 1:1 + 2 * g] = (one <= torch.minimum(room, budget).unsqueeze(-1)) & can_open
    if a.allow_short:  # one contract's margin within position_frac of equity, what it takes within the room;
        need, margin = at_rows(q.close_short_need, row), at_rows(q.close_short_margin, row)  # or a covered call
        naked = (need <= room.unsqueeze(-1)) & (margin <= budget.unsqueeze(-1))
        called = (env.cash < env.margin) & (env.margin > 0)  # a margin call opens nothing, covered or not
        naked[:, :g] |= ((free_cover(env) >= 1) & ~called).unsqueeze(-1)
        mask[:, 1 + 2 * g:1 + 4 * g] = naked & can_open
    if a.stock_targets:  # a target that changes the holding: lower always, higher when calm and one share fits
        wanted = torch.floor(env.stock_targets * env.equity.clamp_min(0).unsqueeze(-1) / spot.unsqueeze(-1))
        held = env.shares.unsqueeze(-1)
        one_share = share_price_with_fees(spot, env.market_cfg.costs)
        can_buy = (~turbulent & (room >= one_share)).unsqueeze(-1)
        mask[:, a.first_stock:a.close_all] = (wanted < held) | ((wanted > held) & can_buy)
    return mask


def episode_stats(env: BatchedOptionsEnv, idx: Tensor) -> dict[str, np.ndarray]:
    """The statistics of the copies ``idx`` whose episodes end now, on the host."""
    steps = (env.t - env.t_start)[idx]
    curves = env.equity_curve[idx]
    out = {
        "env": idx, "symbol": env.sym[idx], "start": env.t_start[idx], "steps": steps,
        "reward": env.stats["reward"][idx],
        "return": env.equity[idx] - env.cfg.initial_cash,
        "return_pct": (env.equity[idx] / env.cfg.initial_cash - 1.0) * 100.0,
        "closed": env.stats["closed"][idx], "wins": env.stats["wins"][idx],
        "open": env.active[:, idx].sum(0), "invalid": env.stats["invalid"][idx],
        "rejected": env.stats["rejected"][idx], "traded": env.stats["traded"][idx],
        "margin_calls": env.stats["margin_calls"][idx], "shares": env.shares[idx],
        "costs": env.costs_paid[:, idx].T,
        # False for a first episode cut short by staggering (options_env's _stagger): a real episode, but its
        # return covers fewer bars, so the training metrics leave it out (metrics.episode_sums).
        "full": env.t_end[idx] == env.episode_end(env.t_start[idx]),
    }
    out = to_host({**out, "curves": curves}, packed=env.device.type != "cpu")
    curves = out.pop("curves")
    out["equity_curve"] = ragged([curves[i, : s + 1] for i, s in enumerate(out["steps"])])
    return out


def to_host(tensors: dict[str, Tensor], packed: bool) -> dict[str, np.ndarray]:
    """The tensors as numpy arrays of their own dtypes and shapes.

    ``packed``: in one device-to-host copy (a GPU waits once, not once per tensor: 18 syncs per episode end
    were most of a GPU env step's host syncs). Every value goes through float64, exact for bools, floats and
    integers below 2**53 (indices and counts here). On a CPU each tensor is already host memory.
    """
    if not packed:
        return {k: v.cpu().numpy() for k, v in tensors.items()}
    flat = torch.cat([v.reshape(-1).to(torch.float64) for v in tensors.values()]).cpu().numpy()
    out, at = {}, 0
    for k, v in tensors.items():
        n = v.numel()
        out[k] = flat[at:at + n].reshape(tuple(v.shape)).astype(torch.empty(0, dtype=v.dtype).numpy().dtype)
        at += n
    return out


def ragged(arrays: list[np.ndarray]) -> np.ndarray:
    """A 1-D object array of arrays (np.array would make a 2-D array when the lengths agree)."""
    out = np.empty(len(arrays), dtype=object)
    for i, a in enumerate(arrays):
        out[i] = a
    return out
