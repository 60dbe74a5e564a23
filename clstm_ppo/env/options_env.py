"""N independent options-trading copies stepped at once as tensors on one device.

Timing (no look-ahead): the observation at bar t uses data up to t's close; the
action chosen from it fills at bar t+1's open; positions then age to t+1's
close, expire there at intrinsic value, and are marked at mid. The reward is
the change in marked equity (every cost already inside it, counted once).

No Python loop runs over copies or positions: positions are (N, P) slot tensors.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from clstm_ppo.config import EnvConfig, MarketConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.env.actions import ActionSpace
from clstm_ppo.market import (COST_KINDS, bs_call_put, bs_greeks, bs_price, chain_strikes, closing_fee_reserve,
                              order_fill, skewed_iv)
from clstm_ppo.market.costs import fees_only, fill_price, round_trip_fees_one_contract
from clstm_ppo.market.volatility import atm_iv_per_bar

PORTFOLIO_FEATURES = (
    "cash_share", "open_share", "net_delta", "net_gamma", "net_vega", "net_theta",
    "unrealized_pnl", "days_to_expiry", "turbulent", "equity_change", "progress",
)
DAYS_PER_YEAR = 365.0  # option time runs in calendar days


class Observation(NamedTuple):
    market: Tensor  # (N, TW, F) normalised features of the last TW bars up to t
    portfolio: Tensor  # (N, len(PORTFOLIO_FEATURES))
    mask: Tensor  # (N, A) bool: which actions are valid at t
    row: Tensor  # (N,) flat index of bar t: storage keeps this instead of the window (see ``windows``)
    start: Tensor  # (N,) bool: this observation begins an episode


class StepResult(NamedTuple):
    obs: Observation  # after an auto-reset, the new episode's first observation
    reward: Tensor  # (N,)
    terminated: Tensor  # (N,) bool: ruin
    truncated: Tensor  # (N,) bool: episode length or split end reached
    episodes: dict[str, np.ndarray] | None  # statistics of the episodes that ended at this step, else None


class BatchedOptionsEnv:
    def __init__(self, data: MarketData, split: str, market: MarketConfig, cfg: EnvConfig, num_envs: int,
                 device: torch.device | str = "cpu", seed: int = 0, autoreset: bool = True):
        if split not in data.splits:
            raise ValueError(f"unknown split {split!r}; choose one of {', '.join(data.splits)}")
        if cfg.dtype not in ("float32", "float64"):
            raise ValueError(f"env.dtype must be float32 or float64, got {cfg.dtype!r}")
        self.device = torch.device(device)
        self.dtype = getattr(torch, cfg.dtype)
        self.market_cfg, self.cfg = market, cfg
        self.actions = ActionSpace.from_config(market)
        self.num_envs, self.window, self.autoreset = num_envs, data.window, autoreset
        self.split_start, self.split_end = data.splits[split]
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)

        as_tensor = lambda x, dtype=None: torch.as_tensor(np.asarray(x), dtype=dtype or self.dtype, device=self.device)
        self.n_symbols, self.n_bars = data.features.shape[:2]
        self.feature_rows = as_tensor(data.features, torch.float32).reshape(self.n_symbols * self.n_bars, -1).contiguous()
        self.open_px, self.close_px = as_tensor(data.bars["open"]), as_tensor(data.bars["close"])  # (S, T)
        self.atm_iv = as_tensor(atm_iv_per_bar(data.bars, market))
        volume = data.bars.get("volume")
        costs = market.costs
        option_volume = (np.maximum(volume * costs.option_volume_ratio, costs.min_option_volume) if volume is not None
                         else np.full_like(data.bars["close"], costs.min_option_volume))
        self.option_volume = as_tensor(option_volume)
        days = np.diff(data.dates.values).astype("timedelta64[s]").astype(np.float64) / 86400.0
        self.gap_days = as_tensor(np.concatenate([[0.0], days]))  # calendar days from bar t-1 to bar t
        self.turbulent_bar = as_tensor(data.turbulence > data.turbulence_threshold, torch.bool)  # known at t's close
        grid_m = torch.tensor(market.moneyness, dtype=self.dtype, device=self.device)
        grid_e = torch.tensor(market.expiries_days, dtype=self.dtype, device=self.device)
        self.grid_moneyness = grid_m.repeat(len(market.expiries_days))  # (G,), moneyness fastest
        self.grid_expiry = grid_e.repeat_interleave(len(market.moneyness))
        self.window_offsets = torch.arange(-self.window + 1, 1, device=self.device)
        self._build_chain_tables()

        n, p = num_envs, cfg.max_positions
        self.slot_ids = torch.arange(p, device=self.device)
        zeros = lambda *shape, dtype=None: torch.zeros(*shape, dtype=dtype or self.dtype, device=self.device)
        self.sym = zeros(n, dtype=torch.long)
        self.t = zeros(n, dtype=torch.long)
        self.t_start, self.t_end = zeros(n, dtype=torch.long), zeros(n, dtype=torch.long)
        self.cash, self.equity, self.peak = zeros(n), zeros(n), zeros(n)
        self.active, self.is_call = zeros(n, p, dtype=torch.bool), zeros(n, p, dtype=torch.bool)
        self.strike, self.dte, self.contracts = zeros(n, p), zeros(n, p), zeros(n, p)
        self.entry_cost, self.mark = zeros(n, p), zeros(n, p)
        self.greeks = zeros(n, 4)  # net delta, gamma, vega, theta in $ terms
        self.stats = {k: zeros(n) for k in ("reward", "closed", "wins", "invalid", "rejected")}
        self.costs_paid = zeros(n, len(COST_KINDS))
        self.max_len = self._longest_episode()
        self.equity_curve = zeros(n, self.max_len + 1)
        self._mask = zeros(n, self.actions.n, dtype=torch.bool)

    # ------------------------------------------------------------------ chain tables

    def _build_chain_tables(self) -> None:
        """Quote the whole chain of every bar once: it depends on the bar, never on a copy's state.

        ``close_cost`` (S, T, 2G): one contract's cost at t's close, for the action mask.
        ``open_*``: strikes, mids and vols at t's open with the vol known at t-1, for fills at t.
        """
        m, g = self.market_cfg, self.actions.grid_size
        expiry_years = (self.grid_expiry / DAYS_PER_YEAR).expand(*self.close_px.shape, g)
        prev_iv = torch.cat([self.atm_iv[:, :1], self.atm_iv[:, :-1]], dim=1)  # at t's open, t-1's vol is known

        def quote(spot: Tensor, atm_iv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            spot = spot.unsqueeze(-1).expand(*spot.shape, g)
            strike = chain_strikes(spot, self.grid_moneyness.expand_as(spot), m)
            iv = skewed_iv(atm_iv.unsqueeze(-1), strike, spot, m)
            mids = torch.cat(bs_call_put(spot, strike, expiry_years, m.risk_free_rate, m.dividend_yield, iv), -1)
            return strike, mids, iv

        strike, mids, iv = quote(self.close_px, self.atm_iv)
        log_m = torch.log(strike / self.close_px.unsqueeze(-1)).repeat(1, 1, 2)
        volume = self.option_volume.unsqueeze(-1)
        ask = fill_price(mids, torch.ones_like(mids), False, iv.repeat(1, 1, 2), log_m, volume, m.costs)
        self.close_cost = ask * m.multiplier + round_trip_fees_one_contract(m.costs)
        self.open_strike, self.open_mid, self.open_iv = quote(self.open_px, prev_iv)

    # ------------------------------------------------------------------ episode bounds

    def _longest_episode(self) -> int:
        first = self.split_start + self.window - 1
        if self.cfg.episode_length <= 0:
            return self.split_end - 1 - first
        return min(self.cfg.episode_length, self.split_end - 1 - first)

    def _draw_starts(self, count: int) -> tuple[Tensor, Tensor]:
        first = self.split_start + self.window - 1  # the whole window lies inside the split
        last_bar = self.split_end - 1
        latest = max(first, last_bar - self.cfg.episode_length) if self.cfg.episode_length > 0 else first
        start = torch.randint(first, latest + 1, (count,), generator=self.generator, device=self.device)
        length = self.cfg.episode_length if self.cfg.episode_length > 0 else last_bar - first
        return start, (start + length).clamp(max=last_bar)

    # ------------------------------------------------------------------ reset

    def reset(self, starts: Tensor | None = None) -> Observation:
        """Start every copy afresh: at random bars, or at ``starts`` (copy i on underlying i mod S)."""
        self._reset_copies(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        if starts is not None:
            starts = starts.to(self.device).long()
            first = self.split_start + self.window - 1
            if starts.shape != (self.num_envs,) or (starts < first).any() or (starts > self.split_end - 2).any():
                raise ValueError(f"starts must be {self.num_envs} bars in [{first}, {self.split_end - 2}]")
            length = self.cfg.episode_length if self.cfg.episode_length > 0 else self.split_end
            self.sym = torch.arange(self.num_envs, device=self.device) % self.n_symbols
            self.t, self.t_start = starts.clone(), starts.clone()
            self.t_end = (starts + length).clamp(max=self.split_end - 1)
        return self._observe()

    def evaluation_starts(self, count: int) -> Tensor:
        """``count`` starts spread evenly over the split, each with room for a full-length episode."""
        first = self.split_start + self.window - 1
        last = max(first, self.split_end - 1 - self.cfg.episode_length) if self.cfg.episode_length > 0 else first
        return torch.linspace(first, last, count, device=self.device).round().long()

    # Every tensor that changes as the copies step: saved in checkpoints for an exact resume.
    STATE = ("sym", "t", "t_start", "t_end", "cash", "equity", "peak", "active", "is_call", "strike", "dte",
             "contracts", "entry_cost", "mark", "greeks", "costs_paid", "equity_curve", "_mask")

    def state_dict(self) -> dict:
        state = {name: getattr(self, name).cpu() for name in self.STATE}
        state["stats"] = {k: v.cpu() for k, v in self.stats.items()}
        state["generator"] = self.generator.get_state()
        return state

    def load_state_dict(self, state: dict) -> None:
        if state["sym"].shape[0] != self.num_envs:
            raise ValueError(f"saved env state has {state['sym'].shape[0]} copies, this env {self.num_envs}")
        for name in self.STATE:
            setattr(self, name, state[name].to(self.device))
        self.stats = {k: v.to(self.device) for k, v in state["stats"].items()}
        self.generator.set_state(state["generator"])

    def _reset_copies(self, which: Tensor) -> None:
        count = int(which.sum())
        if count == 0:
            return
        self.sym[which] = torch.randint(0, self.n_symbols, (count,), generator=self.generator, device=self.device)
        start, end = self._draw_starts(count)
        self.t[which], self.t_start[which], self.t_end[which] = start, start, end
        self.cash[which] = self.cfg.initial_cash
        self.equity[which] = self.cfg.initial_cash
        self.peak[which] = self.cfg.initial_cash
        for tensor in (self.active, self.is_call):
            tensor[which] = False
        for tensor in (self.strike, self.dte, self.contracts, self.entry_cost, self.mark, self.greeks,
                       self.costs_paid, self.equity_curve, *self.stats.values()):
            tensor[which] = 0
        self.equity_curve[which, 0] = self.cfg.initial_cash

    # ------------------------------------------------------------------ pricing helpers

    def _pricing_inputs(self, spot: Tensor, t_bar: Tensor, strike: Tensor, dte: Tensor):
        """(spot, strike, years, iv) for (N,) or (N, P) options, with vol known at bar ``t_bar``."""
        atm = self.atm_iv[self.sym, t_bar].view(-1, *([1] * (strike.dim() - 1)))  # (N,) or (N, 1)
        strike = torch.where(strike > 0, strike, spot)  # empty slots (strike 0) get a harmless placeholder
        return spot, strike, dte.clamp_min(0) / DAYS_PER_YEAR, skewed_iv(atm, strike, spot, self.market_cfg)

    def _quote(self, spot: Tensor, t_bar: Tensor, strike: Tensor, dte: Tensor, is_call: Tensor) -> tuple[Tensor, Tensor]:
        """Mid price per share and implied vol of (N,) or (N, P) options."""
        spot, strike, years, iv = self._pricing_inputs(spot, t_bar, strike, dte)
        m = self.market_cfg
        return bs_price(spot, strike, years, m.risk_free_rate, m.dividend_yield, iv, is_call), iv

    # ------------------------------------------------------------------ step

    def step(self, action: Tensor) -> StepResult:
        reward, terminated, truncated = self._advance(action.to(self.device).long())
        done = terminated | truncated
        episodes = None
        if bool(done.any()):  # the one host sync of a step
            episodes = self._episode_stats(done)
            if self.autoreset:
                self._reset_copies(done)
        return StepResult(self._observe(), reward, terminated, truncated, episodes)

    def _advance(self, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Fill ``action`` at t+1's open, age and mark at t+1's close: pure tensor work, no host sync."""
        a = self.actions
        rows = torch.arange(self.num_envs, device=self.device)
        valid = self._mask[rows, action]
        self.stats["invalid"] += (~valid).to(self.dtype)
        action = torch.where(valid, action, torch.zeros_like(action))  # a masked action is never executed
        prev_equity = self.equity.clone()
        t_now, t_next = self.t, self.t + 1
        spot_open = self.open_px[self.sym, t_next].unsqueeze(-1)  # (N, 1)
        opt_volume = self.option_volume[self.sym, t_now].unsqueeze(-1)  # yesterday's volume: known at the fill
        self.dte = torch.where(self.active, self.dte - self.gap_days[t_next].unsqueeze(-1), self.dte)

        # 1. Sells at t+1's open: forced by turbulence at t, close-all, or the worst/best position.
        pnl_now = torch.where(self.active, self.mark - self.entry_cost, torch.full_like(self.mark, float("nan")))
        worst = pnl_now.nan_to_num(float("inf")).argmin(-1)
        best = pnl_now.nan_to_num(float("-inf")).argmax(-1)
        forced = self.turbulent_bar[t_now]
        sell = self.active & (forced | (action == a.close_all)).unsqueeze(-1)
        sell[rows, worst] |= (action == a.close_worst) & self.active[rows, worst]
        sell[rows, best] |= (action == a.close_best) & self.active[rows, best]
        sell_mid, sell_iv = self._quote(spot_open, t_now, self.strike, self.dte, self.is_call)
        sold = torch.where(sell, self.contracts, torch.zeros_like(self.contracts))
        log_m = torch.log(torch.where(self.active, self.strike, spot_open) / spot_open)
        fill = order_fill(sell_mid, sold, True, sell_iv, log_m,
                          opt_volume, self.market_cfg.costs, self.market_cfg.multiplier)
        proceeds = fill.price * sold * self.market_cfg.multiplier - fees_only(fill)
        self._book_closes(sell, proceeds, fill.costs)

        # 2. Buy-to-open at t+1's open into the first free slot.
        self._open(action, spot_open.squeeze(-1), t_next, opt_volume.squeeze(-1))

        # 3. Age to t+1's close: expiry settles at intrinsic, the rest is marked at mid.
        spot_close = self.close_px[self.sym, t_next].unsqueeze(-1)
        expired = self.active & (self.dte <= 0)
        intrinsic = torch.where(self.is_call, spot_close - self.strike, self.strike - spot_close).clamp_min(0)
        payout = intrinsic * self.contracts * self.market_cfg.multiplier
        self._book_closes(expired, payout, None)
        self.t = t_next
        self._mark()

        # 4. Reward, shaping, episode ends.
        reward = (self.equity - prev_equity) * (self.cfg.reward_scale / self.cfg.initial_cash)
        self.peak = torch.maximum(self.peak, self.equity)
        if self.cfg.drawdown_penalty:
            reward -= self.cfg.drawdown_penalty * (1.0 - self.equity / self.peak)
        if self.cfg.turbulence_penalty:
            reward -= self.cfg.turbulence_penalty * (self.turbulent_bar[self.t] & self.active.any(-1)).to(self.dtype)
        self.stats["reward"] += reward
        steps = self.t - self.t_start
        self.equity_curve[rows, steps.clamp(max=self.max_len)] = self.equity
        terminated = self.equity < self.cfg.ruin_fraction * self.cfg.initial_cash
        truncated = (self.t >= self.t_end) & ~terminated
        return reward, terminated, truncated

    def _book_closes(self, closing: Tensor, cash_in: Tensor, costs: Tensor | None) -> None:
        """Settle ``closing`` slots: cash in, trade P&L net of every cost, and the slot freed."""
        cash_in = torch.where(closing, cash_in, torch.zeros_like(cash_in))
        self.cash += cash_in.sum(-1)
        pnl = cash_in - self.entry_cost
        self.stats["closed"] += closing.sum(-1).to(self.dtype)
        self.stats["wins"] += (closing & (pnl > 0)).sum(-1).to(self.dtype)
        if costs is not None:
            self.costs_paid += torch.where(closing.unsqueeze(-1), costs, torch.zeros_like(costs)).sum(1)
        self.active &= ~closing
        self.contracts = torch.where(closing, torch.zeros_like(self.contracts), self.contracts)
        self.entry_cost = torch.where(closing, torch.zeros_like(self.entry_cost), self.entry_cost)

    def _open(self, action: Tensor, spot: Tensor, t_fill: Tensor, opt_volume: Tensor) -> None:
        """Buy-to-open at ``t_fill``'s open into each buying copy's first free slot."""
        cfg, costs, mult, grid = self.cfg, self.market_cfg.costs, self.market_cfg.multiplier, self.actions.grid_size
        buying = (action >= 1) & (action <= 2 * grid)
        quote_index = (action - 1).clamp(0, 2 * grid - 1)  # calls then puts, as in the action space
        g = quote_index % grid
        is_call = quote_index < grid
        mid = self.open_mid[self.sym, t_fill, quote_index]
        strike = self.open_strike[self.sym, t_fill, g]
        iv = self.open_iv[self.sym, t_fill, g]
        expiry = self.grid_expiry[g]
        log_m = torch.log(strike / spot)
        # Size: position_frac of equity at the ask; then as many as cash allows after the closing-fee reserves.
        first_ask = fill_price(mid, torch.ones_like(spot), False, iv, log_m, opt_volume, costs)
        wanted = torch.floor(cfg.position_frac * self.equity / (first_ask * mult).clamp_min(1e-12))
        ask = fill_price(mid, wanted, False, iv, log_m, opt_volume, costs)  # more contracts: more slippage
        per_contract = ask * mult + 2 * (costs.commission_per_contract + costs.occ_clearing_per_contract
                                         + costs.orf_per_contract) + costs.finra_taf_per_contract
        room = self._cash_room()
        affordable = torch.floor((room / per_contract.clamp_min(1e-12)).clamp_min(0))
        contracts = torch.minimum(wanted, affordable)
        free = ~self.active
        has_slot = free.any(-1)
        go = buying & has_slot & (contracts >= 1)
        self.stats["rejected"] += (buying & ~go).to(self.dtype)
        contracts = torch.where(go, contracts, torch.zeros_like(contracts))
        fill = order_fill(mid, contracts, False, iv, log_m, opt_volume, costs, mult)
        cost = fill.price * contracts * mult + fees_only(fill)
        self.cash -= cost
        self.costs_paid += fill.costs
        slot = free.to(torch.int8).argmax(-1)
        here = go.unsqueeze(-1) & (self.slot_ids == slot.unsqueeze(-1))  # (N, P) one-hot: no sync, no scatter
        self.active |= here
        self.is_call = torch.where(here, is_call.unsqueeze(-1), self.is_call)
        for name, value in (("strike", strike), ("dte", expiry), ("contracts", contracts), ("entry_cost", cost)):
            setattr(self, name, torch.where(here, value.unsqueeze(-1), getattr(self, name)))

    def _cash_room(self) -> Tensor:
        """Cash a new order may spend: what is left after every open position's closing-fee reserve and
        the per-order commission minimums of buying and later selling it."""
        costs = self.market_cfg.costs
        reserve = closing_fee_reserve(self.contracts, costs).sum(-1)
        return self.cash - reserve - 2 * costs.commission_min_per_order

    def _mark(self) -> None:
        spot = self.close_px[self.sym, self.t].unsqueeze(-1)
        spot, strike, years, iv = self._pricing_inputs(spot, self.t, self.strike, self.dte)
        m = self.market_cfg
        greeks = bs_greeks(spot, strike, years, m.risk_free_rate, m.dividend_yield, iv, self.is_call)
        size = torch.where(self.active, self.contracts * self.market_cfg.multiplier, torch.zeros_like(self.contracts))
        self.mark = greeks.price * size
        self.equity = self.cash + self.mark.sum(-1)
        s = spot.squeeze(-1)
        self.greeks = torch.stack([
            (greeks.delta * size).sum(-1) * s,  # $ change per 100% move
            (greeks.gamma * size).sum(-1) * s * s * 1e-4,  # $ change in delta-$ per 1% move, squared
            (greeks.vega * size).sum(-1) * 0.01,  # $ per vol point
            (greeks.theta * size).sum(-1) / DAYS_PER_YEAR,  # $ per calendar day
        ], dim=-1)

    # ------------------------------------------------------------------ observation

    def _observe(self) -> Observation:
        row = self.sym * self.n_bars + self.t
        market = self.windows(row)
        equity = self.equity.clamp_min(1e-9)
        open_count = self.active.sum(-1).to(self.dtype)
        dte = torch.where(self.active, self.dte, torch.zeros_like(self.dte)).sum(-1) / open_count.clamp_min(1)
        span = (self.t_end - self.t_start).clamp_min(1).to(self.dtype)
        turbulent = self.turbulent_bar[self.t]
        portfolio = torch.stack([
            self.cash / equity,
            open_count / self.cfg.max_positions,
            *(self.greeks / equity.unsqueeze(-1)).unbind(-1),
            (self.mark.sum(-1) - torch.where(self.active, self.entry_cost, torch.zeros_like(self.mark)).sum(-1)) / equity,
            dte / max(self.market_cfg.expiries_days),
            turbulent.to(self.dtype),
            self.equity / self.cfg.initial_cash - 1.0,
            (self.t - self.t_start).to(self.dtype) / span,
        ], dim=-1).to(torch.float32)
        self._mask = self._action_mask(turbulent)
        return Observation(market, portfolio, self._mask.clone(), row, self.t == self.t_start)

    def windows(self, rows: Tensor) -> Tensor:
        """Feature windows (..., TW, F) ending at flat bar indices ``rows`` (from ``Observation.row``)."""
        flat = (rows.unsqueeze(-1) + self.window_offsets).reshape(-1)
        return self.feature_rows.index_select(0, flat).view(*rows.shape, self.window, -1)

    def _action_mask(self, turbulent: Tensor) -> Tensor:
        """Valid actions at t; buys are judged at t's close (the fill at t+1 may still be rejected)."""
        a = self.actions
        mask = torch.zeros(self.num_envs, a.n, dtype=torch.bool, device=self.device)
        mask[:, a.hold] = True
        any_open = self.active.any(-1)
        mask[:, a.close_all] = any_open
        mask[:, a.close_worst] = any_open
        mask[:, a.close_best] = any_open
        can_open = (~self.active).any(-1) & ~turbulent
        room = self._cash_room()
        one = self.close_cost[self.sym, self.t]  # (N, 2G): one contract with its buying and closing fees
        ok = (one <= room.unsqueeze(-1)) & (one <= self.cfg.position_frac * self.equity.unsqueeze(-1))
        mask[:, 1:1 + 2 * a.grid_size] = ok & can_open.unsqueeze(-1)
        return mask

    def action_mask(self) -> Tensor:
        return self._mask.clone()

    # ------------------------------------------------------------------ episode statistics

    def _episode_stats(self, done: Tensor) -> dict[str, np.ndarray]:
        idx = torch.nonzero(done).squeeze(-1)
        steps = (self.t - self.t_start)[idx]
        curves = self.equity_curve[idx]
        out = {
            "env": idx, "symbol": self.sym[idx], "start": self.t_start[idx], "steps": steps,
            "reward": self.stats["reward"][idx],
            "return": self.equity[idx] - self.cfg.initial_cash,
            "return_pct": (self.equity[idx] / self.cfg.initial_cash - 1.0) * 100.0,
            "closed": self.stats["closed"][idx], "wins": self.stats["wins"][idx],
            "open": self.active[idx].sum(-1), "invalid": self.stats["invalid"][idx],
            "rejected": self.stats["rejected"][idx], "costs": self.costs_paid[idx],
        }
        out = {k: v.cpu().numpy() for k, v in out.items()}
        curves = curves.cpu().numpy()
        out["equity_curve"] = ragged([curves[i, : s + 1] for i, s in enumerate(out["steps"])])
        return out


def ragged(arrays: list[np.ndarray]) -> np.ndarray:
    """A 1-D object array of arrays (np.array would make a 2-D array when the lengths agree)."""
    out = np.empty(len(arrays), dtype=object)
    for i, a in enumerate(arrays):
        out[i] = a
    return out
