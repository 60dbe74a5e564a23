"""N independent options-trading copies stepped at once as tensors on one device.

Timing (no look-ahead): the observation at bar t uses data up to t's close; the
action chosen from it fills at bar t+1's open; positions then age to t+1's
close, expire there at intrinsic value, and are marked at mid. The reward is
the change in marked equity (every cost already inside it, counted once).

Here: construction, reset, the clock's step and checkpoint state. Orders are in env/orders.py, the account
between them (carry, expiries, marking, margin) in env/accounting.py, observations in env/observation.py, the
per-bar market tables in env/quotes.py and the feature windows in data/windows.py.

No Python loop runs over copies or positions. Layout, chosen for speed on CPU and
GPU alike: per-copy values are (N,) vectors; positions are slot-major (P, N), so
a copy's sum over its slots is P-1 contiguous vector adds rather than a short
inner reduction; costs by kind are (K, N); bar series are read at a copy's flat
row sym * T + t with one index_select.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from clstm_ppo.config import CHOICES, EnvConfig, MarketConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.windows import MarketWindows
from clstm_ppo.env.accounting import accrue_carry, cash_room, free_cover, mark_to_market, settle_expiries
from clstm_ppo.env.actions import ActionSpace
from clstm_ppo.env.observation import (
    STAT_NAMES,
    BookedPosition,
    Observation,
    StepResult,
    episode_stats,
    portfolio_features,
    valid_actions,
)
from clstm_ppo.env.orders import close_options, open_option, slots_to_close, trade_shares
from clstm_ppo.env.quotes import at_rows, build_quotes
from clstm_ppo.market import COST_KINDS
from clstm_ppo.market.flags import as_float


class BatchedOptionsEnv:
    def __init__(self, data: MarketData, split: str, market: MarketConfig, cfg: EnvConfig, num_envs: int,
                 device: torch.device | str = "cpu", seed: int = 0, autoreset: bool = True):
        self.market_windows = MarketWindows(data, split, device)  # checks the split's name first
        if cfg.dtype not in CHOICES["env.dtype"]:
            raise ValueError(f"env.dtype must be float32 or float64, got {cfg.dtype!r}")
        self.device = torch.device(device)
        self.dtype = getattr(torch, cfg.dtype)
        self.market_cfg, self.cfg = market, cfg
        self.actions = ActionSpace.from_config(market)
        self.num_envs, self.autoreset = num_envs, autoreset
        # Staggering spreads the trainer's copies over the episode's phase. A single copy has nothing to spread
        # against, and an env without autoreset (the walks, gymnasium, predict) is stepped episode by episode.
        self.staggered = cfg.stagger_starts and autoreset and num_envs > 1
        self.dates = data.dates.values
        w = self.market_windows  # the split's bounds and the table's shape, as the env's clock reads them
        self.window, self.n_symbols, self.n_bars = w.window, w.n_symbols, w.n_bars
        self.split_start, self.split_end, self.first_bar = w.split_start, w.split_end, w.first_bar
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)

        turbulent = np.asarray(data.turbulence > data.turbulence_threshold)
        self.turbulent_bar = torch.as_tensor(turbulent, dtype=torch.bool, device=self.device)  # (T,) known at t's close
        grid_m = torch.tensor(market.moneyness, dtype=self.dtype, device=self.device)
        grid_e = torch.tensor(market.expiries_days, dtype=self.dtype, device=self.device)
        self.grid_moneyness = grid_m.repeat(len(market.expiries_days))  # (G,), moneyness fastest
        self.grid_expiry = grid_e.repeat_interleave(len(market.moneyness))
        self.stock_targets = torch.tensor(market.stock_targets, dtype=self.dtype, device=self.device)
        expiry_index = torch.arange(len(market.expiries_days), device=self.device).repeat_interleave(
            len(market.moneyness))
        # (S, T) series are read at a copy's flat row sym * T + t (``quotes.at_rows``); docs/MARKET.md has the rules.
        self.quotes = build_quotes(data, market, self.grid_moneyness, expiry_index, self.dtype, self.device)

        n, p = num_envs, cfg.max_positions
        self.copy_ids = torch.arange(n, device=self.device)
        # Slot ranks P..1: the first slot of a column ranks highest, so ``orders.first_slot`` needs no argmax.
        self.slot_rank = torch.arange(p, 0, -1, dtype=self.dtype, device=self.device).unsqueeze(-1)

        def zeros(*shape: int, dtype: torch.dtype | None = None) -> Tensor:
            return torch.zeros(*shape, dtype=dtype or self.dtype, device=self.device)

        self.sym, self.t = zeros(n, dtype=torch.long), zeros(n, dtype=torch.long)
        self.t_start, self.t_end = zeros(n, dtype=torch.long), zeros(n, dtype=torch.long)
        self.cash, self.equity, self.peak = zeros(n), zeros(n), zeros(n)
        # Positions are slot-major (P, N). Empty slots hold no contracts and no cost; their other fields
        # are stale but finite (strike > 0), so every slot can be priced without masking its inputs.
        self.active, self.is_call = zeros(p, n, dtype=torch.bool), zeros(p, n, dtype=torch.bool)
        self.short = zeros(p, n, dtype=torch.bool)  # sold to open: its mark and P&L count against the account
        self.shares, self.margin = zeros(n), zeros(n)  # the underlying held; the shorts' margin at the last close
        self.strike = torch.ones(p, n, dtype=self.dtype, device=self.device)
        self.expiry_bar, self.expiry_time = zeros(p, n), zeros(p, n)  # the bar whose close settles it; its time
        # entry_cost and mark are signed: what a long cost (+) or a short brought in (-); a long's value (+) or
        # what buying a short back would cost (-). P&L is mark - entry_cost either way.
        self.contracts, self.entry_cost, self.mark = zeros(p, n), zeros(p, n), zeros(p, n)
        self.greeks = zeros(4, n)  # net delta, gamma, vega, theta in $ terms
        self.stats = {k: zeros(n) for k in STAT_NAMES}
        self.costs_paid = zeros(len(COST_KINDS), n)
        self.max_len = self._longest_episode()
        self.equity_curve = zeros(n, self.max_len + 1)
        self._mask = zeros(n, self.actions.n, dtype=torch.bool)

    @property
    def row(self) -> Tensor:
        """(N,) flat index sym * T + t of each copy's current bar."""
        return self.sym * self.n_bars + self.t

    # ------------------------------------------------------------------ episode bounds

    def _longest_episode(self) -> int:
        first = self.first_bar
        if self.cfg.episode_length <= 0:
            return self.split_end - 1 - first
        return min(self.cfg.episode_length, self.split_end - 1 - first)

    def episode_end(self, start: Tensor) -> Tensor:
        """The last bar of a full-length episode begun at ``start``: ``env.episode_length`` bars on, capped at
        the split's last bar (which is the end, whatever the start, with episode_length 0)."""
        last_bar = self.split_end - 1
        if self.cfg.episode_length <= 0:
            return torch.full_like(start, last_bar)
        return (start + self.cfg.episode_length).clamp(max=last_bar)

    def _draw_starts(self, count: int) -> tuple[Tensor, Tensor]:
        first = self.first_bar
        latest = max(first, self.split_end - 1 - self.cfg.episode_length) if self.cfg.episode_length > 0 else first
        start = torch.randint(first, latest + 1, (count,), generator=self.generator, device=self.device)
        return start, self.episode_end(start)

    def _stagger(self) -> None:
        """Cut every copy's episode to U{1..its full length} bars, drawn from the env's generator (so a seed, and a
        checkpoint's generator state, still fix it): the copies then end, and auto-reset, on different steps ever
        after, as far apart as a long run would have put them. The remaining bars t_end - t are then uniform, as at
        a random moment of full-length episodes. The cut episode is a real, shorter one: its progress feature runs
        0..1 over its own bars, and its record says ``full: False`` (``episode_stats``)."""
        span = self.t_end - self.t_start
        u = torch.rand(self.num_envs, generator=self.generator, dtype=torch.float64, device=self.device)
        self.t_end = self.t_start + torch.minimum((u * span).long() + 1, span)

    # ------------------------------------------------------------------ reset

    def reset(self, starts: Tensor | None = None) -> Observation:
        """Start every copy afresh: at random bars, or at ``starts`` (copy i on underlying i mod S).

        Random starts of a ``staggered`` env get first episodes of random length (``_stagger``); ``starts`` get
        full-length episodes. A copy started on the split's last bar can be observed (``python -m
        clstm_ppo.predict``), not stepped.
        """
        self._reset_copies(self.copy_ids)
        if starts is not None:
            starts = starts.to(self.device).long()
            first = self.first_bar
            if starts.shape != (self.num_envs,) or (starts < first).any() or (starts > self.split_end - 1).any():
                raise ValueError(f"starts must be {self.num_envs} bars in [{first}, {self.split_end - 1}]")
            self.sym = self.copy_ids % self.n_symbols
            self.t, self.t_start = starts.clone(), starts.clone()
            self.t_end = self.episode_end(starts)
        elif self.staggered:
            self._stagger()
        return self.observe()

    def book(self, positions: list[BookedPosition]) -> Observation:
        """Put ``positions`` into copy 0's empty book at its current bar, as bought before it for ``paid`` out of
        the initial cash (or sold for ``paid`` into it), mark them at the bar's close and observe again: the
        portfolio a user already holds."""
        if len(positions) > self.cfg.max_positions or self.active[:, 0].any():
            raise ValueError(f"book at most env.max_positions ({self.cfg.max_positions}) positions, into an empty book")
        q, t = self.quotes, int(self.t[0])
        for slot, p in enumerate(positions):
            bar, time = self.expiry_of(p.expiry, t)
            if bar <= t:
                raise ValueError(f"a position expiring {p.expiry} has expired by the data's last bar")
            flow = -p.paid if p.short else p.paid  # what the account paid for it (a sale: minus what it brought in)
            self.active[slot, 0], self.is_call[slot, 0], self.short[slot, 0] = True, p.is_call, p.short
            self.strike[slot, 0], self.contracts[slot, 0], self.entry_cost[slot, 0] = p.strike, p.contracts, flow
            self.expiry_bar[slot, 0], self.expiry_time[slot, 0] = float(bar), time
            self.cash[0] -= flow
        mark_to_market(self, at_rows(q.close_px, self.row), self.row)
        self.peak = torch.maximum(self.peak, self.equity)
        return self.observe()

    def expiry_of(self, expiry: np.datetime64, t: int) -> tuple[int, float]:
        """(bar, time in days) at which an option listed to expire on calendar day ``expiry`` settles, seen
        from bar ``t``: the last bar on or before that day, or past the data (bar T, time by the calendar)."""
        dates, close_time = self.dates.astype("datetime64[D]"), self.quotes.close_time
        day = np.datetime64(expiry, "D")
        if day > dates[-1]:
            return self.n_bars, float(close_time[t]) + float((day - dates[t]) / np.timedelta64(1, "D"))
        bar = int(np.searchsorted(dates, day, side="right") - 1)
        return bar, float(close_time[bar])

    # Every tensor that changes as the copies step: saved in checkpoints for an exact resume.
    STATE = ("sym", "t", "t_start", "t_end", "cash", "equity", "peak", "active", "is_call", "short", "shares",
             "margin", "strike", "expiry_bar", "expiry_time",
             "contracts", "entry_cost", "mark", "greeks", "costs_paid", "equity_curve", "_mask")

    def state_dict(self) -> dict:
        # Copies, not views: several state tensors are updated in place as the env steps on.
        state = {name: getattr(self, name).detach().to("cpu", copy=True) for name in self.STATE}
        state["stats"] = {k: v.detach().to("cpu", copy=True) for k, v in self.stats.items()}
        state["generator"] = self.generator.get_state()
        return state

    def fits(self, state: dict) -> bool:
        """Whether ``state`` (from ``state_dict``) has this env's copies, slots and layout, and a random stream
        of this device's kind (a CUDA generator's state is 16 bytes, a CPU one's 5,056)."""
        return all(name in state and tuple(state[name].shape) == tuple(getattr(self, name).shape)
                   for name in self.STATE) and state["generator"].numel() == self.generator.get_state().numel()

    def load_state_dict(self, state: dict) -> None:
        if not self.fits(state):
            raise ValueError("saved env state does not fit this env (other --num-envs, max_positions, "
                             "episode length or an older layout)")
        for name in self.STATE:
            setattr(self, name, state[name].to(self.device))
        # Statistics added since a checkpoint was written start at zero.
        self.stats = {k: state["stats"][k].to(self.device) if k in state["stats"] else torch.zeros_like(v)
                      for k, v in self.stats.items()}
        self.generator.set_state(state["generator"])

    def _reset_copies(self, idx: Tensor) -> None:
        """Start the copies ``idx`` (indices) afresh at random bars: empty book, initial cash."""
        count = idx.numel()
        if count == 0:
            return
        self.sym.index_copy_(0, idx, torch.randint(0, self.n_symbols, (count,), generator=self.generator,
                                                   device=self.device))
        start, end = self._draw_starts(count)
        for tensor, value in ((self.t, start), (self.t_start, start), (self.t_end, end)):
            tensor.index_copy_(0, idx, value)
        for tensor in (self.cash, self.equity, self.peak):
            tensor.index_fill_(0, idx, self.cfg.initial_cash)
        for tensor in (self.shares, self.margin):
            tensor.index_fill_(0, idx, 0)
        for tensor in (self.active, self.is_call, self.short, self.contracts, self.entry_cost, self.mark,
                       self.expiry_bar, self.expiry_time, self.greeks, self.costs_paid):
            tensor.index_fill_(1, idx, 0)
        for tensor in (self.equity_curve, *self.stats.values()):
            tensor.index_fill_(0, idx, 0)
        self.equity_curve[:, 0].index_fill_(0, idx, self.cfg.initial_cash)

    # ------------------------------------------------------------------ step

    def step(self, action: Tensor) -> StepResult:
        reward, terminated, truncated = self._advance(action.to(self.device).long())
        done = terminated | truncated
        episodes = None
        idx = torch.nonzero(done).squeeze(-1)  # a step's second host sync (the first finds the copies that sell)
        if idx.numel():
            episodes = episode_stats(self, idx)  # and a third when an episode ends: its statistics to the host
            if self.autoreset:
                self._reset_copies(idx)
        return StepResult(self.observe(), reward, terminated, truncated, episodes)

    def _advance(self, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Fill ``action`` at t+1's fill, settle and mark at t+1's close: tensor work, one host sync
        (``orders.close_options``)."""
        valid = self._mask.gather(1, action.unsqueeze(-1)).squeeze(-1)
        self.stats["invalid"] += ~valid
        action = action * valid  # a masked action is never executed: it becomes hold (0)
        prev_equity = self.equity
        now, t_next = self.row, self.t + 1
        nxt = now + 1
        margin_call = (self.cash < self.margin) & (self.margin > 0)  # t's close left the shorts' margin uncovered
        self.stats["margin_calls"] += margin_call

        # 0. From t's close to t+1's close cash earns interest and the shares their dividends.
        accrue_carry(self, now, t_next)
        # 1. Closes at t+1's fill (its open, or its close after a stale open): forced or chosen.
        close_options(self, slots_to_close(self, action, margin_call, nxt), now, nxt)
        # 2. The underlying to its target (all of it out on close-all; turbulence only stops it growing), then an
        # option order.
        trade_shares(self, action, action == self.actions.close_all, self.turbulent_bar.index_select(0, self.t), nxt)
        open_option(self, action, nxt, t_next)
        # 3. At t+1's close: what expires on this trading date settles at intrinsic, the rest is marked at mid.
        spot_close = at_rows(self.quotes.close_px, nxt)
        settle_expiries(self, spot_close, t_next)
        self.t = t_next
        mark_to_market(self, spot_close, nxt)

        # 4. Reward, shaping, episode ends.
        reward = (self.equity - prev_equity) * (self.cfg.reward_scale / self.cfg.initial_cash)
        self.peak = torch.maximum(self.peak, self.equity)
        if self.cfg.drawdown_penalty:
            reward -= self.cfg.drawdown_penalty * (1.0 - self.equity / self.peak)
        if self.cfg.turbulence_penalty:
            held = self.active.any(0) | (self.shares > 0)
            held_in_turbulence = self.turbulent_bar.index_select(0, self.t) & held
            reward -= self.cfg.turbulence_penalty * as_float(held_in_turbulence, self.dtype)  # in the env's dtype
        self.stats["reward"] += reward
        steps = (self.t - self.t_start).clamp(max=self.max_len)
        self.equity_curve.view(-1).index_copy_(0, self.copy_ids * (self.max_len + 1) + steps, self.equity)
        terminated = self.equity < self.cfg.ruin_fraction * self.cfg.initial_cash
        truncated = (self.t >= self.t_end) & ~terminated
        return reward, terminated, truncated

    # ------------------------------------------------------------------ observation

    def observe(self) -> Observation:
        """The copies' observation at their current bar (t's close); also what ``step`` and ``reset`` return."""
        self._mask = valid_actions(self)  # judged at t's close; a new tensor each step, never changed after
        return Observation(portfolio_features(self), self._mask, self.row, self.t == self.t_start,
                           self.market_windows)

    def cash_room(self) -> Tensor:
        """(N,) cash a new order may spend (``accounting.cash_room``)."""
        return cash_room(self)

    def free_cover(self) -> Tensor:
        """(N,) call contracts the shares could still cover (``accounting.free_cover``)."""
        return free_cover(self)

    def action_mask(self) -> Tensor:
        return self._mask.clone()
