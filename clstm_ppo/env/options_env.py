"""N independent options-trading copies stepped at once as tensors on one device.

Timing (no look-ahead): the observation at bar t uses data up to t's close; the
action chosen from it fills at bar t+1's open; positions then age to t+1's
close, expire there at intrinsic value, and are marked at mid. The reward is
the change in marked equity (every cost already inside it, counted once).

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
from clstm_ppo.env.actions import ActionSpace
from clstm_ppo.env.observation import (STAT_NAMES, BookedPosition, Observation, StepResult, episode_stats,
                                       portfolio_features, valid_actions)
from clstm_ppo.env.quotes import at_rows, build_quotes
from clstm_ppo.market import COST_KINDS, bs_price, closing_fee_reserve, order_fill
from clstm_ppo.market.black_scholes import bs_greeks_before_expiry
from clstm_ppo.market.costs import fees_only, fill_price_at, order_fill_at, strike_volume
from clstm_ppo.market.flags import as_float, call_sign
from clstm_ppo.market.margin import short_margin
from clstm_ppo.market.volatility import ATM_YEARS, DAYS_PER_YEAR, surface_iv


class BatchedOptionsEnv:
    def __init__(self, data: MarketData, split: str, market: MarketConfig, cfg: EnvConfig, num_envs: int,
                 device: torch.device | str = "cpu", seed: int = 0, autoreset: bool = True):
        if split not in data.splits:
            raise ValueError(f"unknown split {split!r}; choose one of {', '.join(data.splits)}")
        if cfg.dtype not in CHOICES["env.dtype"]:
            raise ValueError(f"env.dtype must be float32 or float64, got {cfg.dtype!r}")
        self.device = torch.device(device)
        self.dtype = getattr(torch, cfg.dtype)
        self.market_cfg, self.cfg = market, cfg
        self.actions = ActionSpace.from_config(market)
        self.num_envs, self.window, self.autoreset = num_envs, data.window, autoreset
        self.dates = data.dates.values
        self.split_start, self.split_end = data.splits[split]
        # The first bar a copy may observe: its window may reach back into earlier splits' bars (they are past).
        self.first_bar = max(self.split_start, self.window - 1)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)

        as_tensor = lambda x, dtype=None: torch.as_tensor(np.asarray(x), dtype=dtype or self.dtype, device=self.device)
        self.n_symbols, self.n_bars = data.features.shape[:2]
        self.feature_rows = as_tensor(data.features, torch.float32).reshape(self.n_symbols * self.n_bars, -1).contiguous()
        self.turbulent_bar = as_tensor(data.turbulence > data.turbulence_threshold, torch.bool)  # (T,) known at t's close
        grid_m = torch.tensor(market.moneyness, dtype=self.dtype, device=self.device)
        grid_e = torch.tensor(market.expiries_days, dtype=self.dtype, device=self.device)
        self.grid_moneyness = grid_m.repeat(len(market.expiries_days))  # (G,), moneyness fastest
        self.grid_expiry = grid_e.repeat_interleave(len(market.moneyness))
        self.stock_targets = torch.tensor(market.stock_targets, dtype=self.dtype, device=self.device)
        n_rows, n_features = self.feature_rows.shape
        self._window_starts = self.feature_rows.as_strided((n_rows - self.window + 1, self.window * n_features),
                                                           (n_features, 1))
        expiry_index = torch.arange(len(market.expiries_days), device=self.device).repeat_interleave(
            len(market.moneyness))
        # (S, T) series are read at a copy's flat row sym * T + t (see ``_at``); docs/MARKET.md has the rules.
        self.quotes = build_quotes(data, market, self.grid_moneyness, expiry_index, self.dtype, self.device)

        n, p = num_envs, cfg.max_positions
        self.copy_ids = torch.arange(n, device=self.device)
        # Slot ranks P..1: the first slot of a column ranks highest, so ``_first_slot`` needs no argmax.
        self.slot_rank = torch.arange(p, 0, -1, dtype=self.dtype, device=self.device).unsqueeze(-1)
        zeros = lambda *shape, dtype=None: torch.zeros(*shape, dtype=dtype or self.dtype, device=self.device)
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

    _at = staticmethod(at_rows)

    # ------------------------------------------------------------------ episode bounds

    def _longest_episode(self) -> int:
        first = self.first_bar
        if self.cfg.episode_length <= 0:
            return self.split_end - 1 - first
        return min(self.cfg.episode_length, self.split_end - 1 - first)

    def _draw_starts(self, count: int) -> tuple[Tensor, Tensor]:
        first = self.first_bar
        last_bar = self.split_end - 1
        latest = max(first, last_bar - self.cfg.episode_length) if self.cfg.episode_length > 0 else first
        start = torch.randint(first, latest + 1, (count,), generator=self.generator, device=self.device)
        length = self.cfg.episode_length if self.cfg.episode_length > 0 else last_bar - first
        return start, (start + length).clamp(max=last_bar)

    # ------------------------------------------------------------------ reset

    def reset(self, starts: Tensor | None = None) -> Observation:
        """Start every copy afresh: at random bars, or at ``starts`` (copy i on underlying i mod S).

        A copy started on the split's last bar can be observed (``python -m clstm_ppo.predict``), not stepped.
        """
        self._reset_copies(self.copy_ids)
        if starts is not None:
            starts = starts.to(self.device).long()
            first = self.first_bar
            if starts.shape != (self.num_envs,) or (starts < first).any() or (starts > self.split_end - 1).any():
                raise ValueError(f"starts must be {self.num_envs} bars in [{first}, {self.split_end - 1}]")
            length = self.cfg.episode_length if self.cfg.episode_length > 0 else self.split_end
            self.sym = self.copy_ids % self.n_symbols
            self.t, self.t_start = starts.clone(), starts.clone()
            self.t_end = (starts + length).clamp(max=self.split_end - 1)
        return self._observe()

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
        self._mark(self._at(q.close_px, self.row), self.row)
        self.peak = torch.maximum(self.peak, self.equity)
        return self._observe()

    def expiry_of(self, expiry: np.datetime64, t: int) -> tuple[int, float]:
        """(bar, time in days) at which an option listed to expire on calendar day ``expiry`` settles, seen
        from bar ``t``: the last bar on or before that day, or past the data (bar T, time by the calendar)."""
        dates, close_time = self.dates.astype("datetime64[D]"), self.quotes.close_time
        day = np.datetime64(expiry, "D")
        if day > dates[-1]:
            return self.n_bars, float(close_time[t]) + float((day - dates[t]) / np.timedelta64(1, "D"))
        bar = int(np.searchsorted(dates, day, side="right") - 1)
        return bar, float(close_time[bar])

    def observable_rows(self) -> Tensor:
        """Flat rows of every bar a copy can observe (its whole window inside the split), all underlyings."""
        bars = torch.arange(self.first_bar, self.split_end, device=self.device)
        return (torch.arange(self.n_symbols, device=self.device).unsqueeze(-1) * self.n_bars + bars).reshape(-1)

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
        for tensor in (self.active, self.is_call, self.short, self.contracts, self.entry_cost, self.mark, self.expiry_bar,
                       self.expiry_time, self.greeks,
                       self.costs_paid):
            tensor.index_fill_(1, idx, 0)
        for tensor in (self.equity_curve, *self.stats.values()):
            tensor.index_fill_(0, idx, 0)
        self.equity_curve[:, 0].index_fill_(0, idx, self.cfg.initial_cash)

    # ------------------------------------------------------------------ step

    def step(self, action: Tensor) -> StepResult:
        reward, terminated, truncated = self._advance(action.to(self.device).long())
        done = terminated | truncated
        episodes = None
        if bool(done.any()):  # a step's second host sync (the first finds the copies that sell)
            idx = torch.nonzero(done).squeeze(-1)
            episodes = episode_stats(self, idx)
            if self.autoreset:
                self._reset_copies(idx)
        return StepResult(self._observe(), reward, terminated, truncated, episodes)

    def _advance(self, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Fill ``action`` at t+1's fill, settle and mark at t+1's close: tensor work, one host sync (``_close``)."""
        a, m = self.actions, self.market_cfg
        valid = self._mask.gather(1, action.unsqueeze(-1)).squeeze(-1)
        self.stats["invalid"] += ~valid
        action = action * valid  # a masked action is never executed: it becomes hold (0)
        prev_equity = self.equity
        now, t_next = self.row, self.t + 1
        nxt = now + 1
        q = self.quotes
        margin_call = (self.cash < self.margin) & (self.margin > 0)  # t's close left the shorts' margin uncovered

        # 0. From t's close to t+1's close cash earns the rate known at t, and the underlying pays its dividends.
        years = (q.close_time.index_select(0, t_next) - q.close_time.index_select(0, self.t)) / DAYS_PER_YEAR
        dividend = torch.expm1(q.dividend_yield.index_select(0, self.sym) * years) * self._at(q.close_px, now)
        self.cash = self.cash * torch.exp(self._at(q.rate_close, now) * years) + self.shares * dividend

        # 1. Closes at t+1's fill (its open, or its close after a stale open): forced by turbulence at t, by a
        # margin call (t's close left the shorts' margin uncovered: every short), or chosen.
        by_pnl = (action == a.close_worst) | (action == a.close_best)
        # The worst position has the lowest P&L, the best the lowest negated P&L: one search serves both.
        negate = 1.0 - 2.0 * self._float(action == a.close_best)
        key = ((self.mark - self.entry_cost) * negate).masked_fill(~self.active, float("inf"))
        picked, _ = self._first_slot(self.active & (key == key.amin(0)))
        close_all = self.turbulent_bar.index_select(0, self.t) | (action == a.close_all)
        self.stats["margin_calls"] += margin_call
        # A position that expires at this very fill (a close fill on its expiry bar) settles at intrinsic instead.
        close = self.active & (close_all | (picked & by_pnl) | (margin_call & self.short)) \
            & (self.expiry_time > self._at(q.fill_time, nxt))
        self._close(close, now, nxt)

        # 2. The underlying to its target (all of it out on close-all; turbulence only stops it growing), then an
        # option order.
        self._trade_shares(action, action == a.close_all, self.turbulent_bar.index_select(0, self.t), nxt)
        self._open(action, nxt, t_next)

        # 3. At t+1's close: what expires on this trading date settles at intrinsic, the rest is marked at mid.
        spot_close = self._at(q.close_px, nxt)
        expired = self.active & (self.expiry_bar <= t_next.to(self.dtype))
        intrinsic = ((spot_close - self.strike) * call_sign(self.is_call, self.dtype)).clamp_min(0)
        settled = intrinsic * (self.contracts * self._float(expired) * self._side()) * m.multiplier
        self._book_closes(expired, settled, None)
        self.t = t_next
        self._mark(spot_close, nxt)

        # 4. Reward, shaping, episode ends.
        reward = (self.equity - prev_equity) * (self.cfg.reward_scale / self.cfg.initial_cash)
        self.peak = torch.maximum(self.peak, self.equity)
        if self.cfg.drawdown_penalty:
            reward -= self.cfg.drawdown_penalty * (1.0 - self.equity / self.peak)
        if self.cfg.turbulence_penalty:
            held = self.active.any(0) | (self.shares > 0)
            held_in_turbulence = self.turbulent_bar.index_select(0, self.t) & held
            reward -= self.cfg.turbulence_penalty * self._float(held_in_turbulence)  # in the env's dtype
        self.stats["reward"] += reward
        steps = (self.t - self.t_start).clamp(max=self.max_len)
        self.equity_curve.view(-1).index_copy_(0, self.copy_ids * (self.max_len + 1) + steps, self.equity)
        terminated = self.equity < self.cfg.ruin_fraction * self.cfg.initial_cash
        truncated = (self.t >= self.t_end) & ~terminated
        return reward, terminated, truncated

    def _side(self) -> Tensor:
        """(P, N) +1 for long slots, -1 for short ones."""
        return 1.0 - 2.0 * self._float(self.short)

    def _close(self, close: Tensor, row: Tensor, fill_row: Tensor) -> None:
        """Close the ``close`` slots at ``fill_row``'s fill (t+1): longs sell at the bid, shorts buy back at the ask,
        with the option volume known at ``row`` (t).

        Only the copies that close are priced: most copies hold on most bars, and pricing every slot of
        every copy was a third of a step. Finding them is a host sync, on CPU free, on a GPU one more per step.
        """
        m, q = self.market_cfg, self.quotes
        closers = close.view(torch.uint8).amax(0).nonzero().squeeze(-1)  # any over slots; bool any() is slow
        if closers.numel() == 0:
            return
        pick = lambda x: x.index_select(-1, closers)  # noqa: E731
        fill_at, sym = pick(fill_row), pick(self.sym)
        strike, contracts = pick(self.strike), pick(self.contracts) * self._float(pick(close))
        spot = self._at(q.fill_px, fill_at)
        log_k_s = torch.log(strike / spot)
        years = (pick(self.expiry_time) - self._at(q.fill_time, fill_at)).clamp_min(0) / DAYS_PER_YEAR
        iv = surface_iv(self._at(q.fill_iv, fill_at), q.long_run_iv.index_select(0, sym), log_k_s, years, m)
        mid = bs_price(spot, strike, years, self._at(q.fill_rate, fill_at), q.dividend_yield.index_select(0, sym), iv,
                       pick(self.is_call), -log_k_s)
        volume = strike_volume(self._at(q.base_volume, pick(row)), log_k_s, years, m.costs, ATM_YEARS)
        selling = 1.0 - self._float(pick(self.short))  # a long is sold, a short is bought back
        fill = order_fill(mid, contracts, selling, iv, log_k_s, volume, m.costs, m.multiplier)
        gross = fill.price * contracts * m.multiplier
        cash_in = gross * (2.0 * selling - 1.0) - fees_only(fill)  # zero in slots that do not close
        self.stats["traded"].index_add_(0, closers, gross.sum(0))
        flows = torch.zeros_like(self.mark).index_copy_(1, closers, cash_in)
        costs = torch.zeros_like(self.costs_paid).index_copy_(1, closers, fill.costs.sum(1))
        self._book_closes(close, flows, costs)

    def _first_slot(self, flags: Tensor) -> tuple[Tensor, Tensor]:
        """(P, N) one-hot of each copy's first flagged slot (all False where none is) and (N,) whether any is."""
        ranked = self.slot_rank * self._float(flags)
        top = ranked.amax(0)
        return flags & (ranked == top), top > 0  # argmax over a short leading dim is slow on CPU

    def _float(self, mask: Tensor) -> Tensor:
        """0/1 floats of a bool mask in the env's dtype (``torch.where`` is avoided: see ``market.flags``)."""
        return as_float(mask, self.dtype)

    def _book_closes(self, closing: Tensor, cash_in: Tensor, costs: Tensor | None) -> None:
        """Settle ``closing`` slots (``cash_in`` is zero elsewhere, negative for a short bought back or settled):
        cash in, P&L net of every cost, slot freed."""
        self.cash = self.cash + cash_in.sum(0)
        self.stats["closed"] += closing.sum(0)
        self.stats["wins"] += (closing & (cash_in > self.entry_cost)).sum(0)
        if costs is not None:
            self.costs_paid += costs
        self.active = self.active & ~closing
        keep = self._float(~closing)
        self.contracts, self.entry_cost = self.contracts * keep, self.entry_cost * keep

    def _trade_shares(self, action: Tensor, close_all: Tensor, turbulent: Tensor, fill_row: Tensor) -> None:
        """Bring the underlying to the chosen share of equity (at t's close) at ``fill_row``'s fill price, in
        whole shares, buying only with the cash room; close-all sells every share. Never short: a negative
        equity targets none."""
        a, bps = self.actions, self.market_cfg.costs.share_cost_bps * 1e-4
        if not a.stock_targets:
            return
        pick = (action - a.first_stock).clamp(0, len(a.stock_targets) - 1)
        targets = self.stock_targets.index_select(0, pick)
        choosing = (action >= a.first_stock) & (action < a.close_all)
        price = self._at(self.quotes.fill_px, fill_row)
        wanted = (torch.floor(targets * self.equity.clamp_min(0) / price) * self._float(choosing)  # others keep theirs
                  + self.shares * self._float(~choosing)) * self._float(~close_all)
        # The cash room caps a purchase; a turbulent bar allows none (a lower target can buy if the price fell).
        most = self.shares + torch.floor((self.cash_room() / (price * (1.0 + bps))).clamp_min(0)) \
            * self._float(~turbulent)
        change = torch.minimum(wanted, most) - self.shares
        notional = change.abs() * price
        self.cash = self.cash - change * price - notional * bps
        self.costs_paid[COST_KINDS.index("shares")] += notional * bps
        self.stats["traded"] += notional
        self.shares = self.shares + change

    def _open(self, action: Tensor, fill_row: Tensor, fill_bar: Tensor) -> None:
        """Open an option at ``fill_row``'s fill (bar ``fill_bar``) into each ordering copy's first free slot:
        bought at the ask for position_frac of equity, or sold at the bid for position_frac of equity in margin."""
        cfg, costs, mult, grid = self.cfg, self.market_cfg.costs, self.market_cfg.multiplier, self.actions.grid_size
        ordering = (action >= 1) & (action <= self.actions.option_orders)
        order = (action - 1).clamp(0, self.actions.option_orders - 1)
        selling = order >= 2 * grid
        quote_index = order - 2 * grid * selling  # calls then puts, as in the action space
        is_call = quote_index < grid
        g = quote_index - grid * (~is_call)
        q, sell = self.quotes, self._float(selling)
        mid, half = self._at(q.fill_mid, fill_row, quote_index), self._at(q.fill_half_spread, fill_row, quote_index)
        strike, opt_volume = self._at(q.fill_strike, fill_row, g), self._at(q.fill_volume, fill_row, g)
        margin = self._at(q.fill_margin, fill_row, quote_index) * mult  # $ per contract sold
        fees = 2 * (costs.commission_per_contract + costs.occ_clearing_per_contract + costs.orf_per_contract) \
            + costs.finra_taf_per_contract  # per contract, opening and closing
        # Size: position_frac of equity in premium (a buy) or in margin (a sale), at most max_volume_share of the
        # strike's volume; then as many as the cash room carries after the closing-fee reserves and the margin.
        first = fill_price_at(mid, 1.0, sell, half, opt_volume, costs) * mult
        per_unit = torch.lerp(first, margin, sell).clamp_min(1e-12)
        # Shares not yet covering a short call cover new call sales, which then need no margin (a covered call):
        # those contracts are sold whatever position_frac says, as a buy-write covers its whole holding.
        covered = self.free_cover() * self._float(selling & is_call)
        wanted = torch.minimum(torch.maximum(torch.floor(cfg.position_frac * self.equity / per_unit), covered),
                               torch.floor(costs.max_volume_share * opt_volume))
        price = fill_price_at(mid, wanted, sell, half, opt_volume, costs) * mult  # more contracts: more slippage
        need = torch.lerp(price, margin - price, sell) + fees  # cash room one (naked) contract takes
        affordable = covered + torch.floor((self.cash_room() / need.clamp_min(1e-12)).clamp_min(0))
        contracts = torch.minimum(wanted, affordable)
        slot, has_slot = self._first_slot(~self.active)
        go = ordering & (contracts >= 1) & has_slot
        self.stats["rejected"] += ordering & ~go
        contracts = contracts * self._float(go)
        fill = order_fill_at(mid, contracts, sell, half, opt_volume, costs, mult)
        premium = fill.price * contracts * mult
        paid = premium * (1.0 - 2.0 * sell) + fees_only(fill)  # a sale brings the premium in, less its fees
        self.stats["traded"] += premium
        self.cash = self.cash - paid
        self.costs_paid += fill.costs
        here = slot & go  # (P, N) one-hot: no sync, no scatter
        self.active = self.active | here
        self.is_call = (self.is_call & ~here) | (here & is_call)
        self.short = (self.short & ~here) | (here & selling)
        # The slot was empty (no contracts, no cost): adding fills it; lerp with 0/1 weights is exact.
        into = self._float(here)
        self.contracts, self.entry_cost = self.contracts + into * contracts, self.entry_cost + into * paid
        self.strike = torch.lerp(self.strike, strike.expand_as(self.strike), into)
        expiry_at = fill_bar * q.expiry_bar.shape[1] + g  # the fill bar's row of the (T, G) expiry tables
        self.expiry_bar = torch.lerp(self.expiry_bar, q.expiry_bar.view(-1).index_select(0, expiry_at), into)
        self.expiry_time = torch.lerp(self.expiry_time, q.expiry_time.view(-1).index_select(0, expiry_at), into)

    def free_cover(self) -> Tensor:
        """(N,) call contracts the shares could still cover: shares not already under a short call, per 100."""
        short_calls = (self.contracts * self._float(self.short & self.is_call)).sum(0) * self.market_cfg.multiplier
        return torch.floor(((self.shares - short_calls) / self.market_cfg.multiplier).clamp_min(0))

    def cash_room(self) -> Tensor:
        """Cash a new order may spend: what is left after the shorts' margin, every open position's closing-fee
        reserve and the per-order commission minimums of opening and later closing it."""
        costs = self.market_cfg.costs
        reserve = closing_fee_reserve(self.contracts, costs).sum(0)  # zero for empty slots
        return self.cash - self.margin - reserve - 2 * costs.commission_min_per_order

    def _mark(self, spot: Tensor, row: Tensor) -> None:
        """Mark every open position at ``row``'s close (after expiries, so every open one has time left), and
        the shorts' margin at that close."""
        m, q = self.market_cfg, self.quotes
        log_k_s = torch.log(self.strike / spot)
        years = (self.expiry_time - q.close_time.index_select(0, self.t)).clamp_min(0) / DAYS_PER_YEAR
        iv = surface_iv(self._at(q.iv_close, row), q.long_run_iv.index_select(0, self.sym), log_k_s, years, m)
        g = bs_greeks_before_expiry(spot, self.strike, years, self._at(q.rate_close, row),
                                    q.dividend_yield.index_select(0, self.sym), iv, self.is_call, -log_k_s)
        size = self.contracts * m.multiplier * self._side()  # zero in empty slots, negative for shorts
        self.mark = g.price * size
        stock = self.shares * spot
        self.equity = self.cash + self.mark.sum(0) + stock
        short_size = self.contracts * m.multiplier * self._float(self.short)
        requirement = short_margin(g.price, spot, self.strike, self.is_call, q.margin_a.index_select(0, self.sym),
                                   q.margin_b.index_select(0, self.sym)) * short_size
        # Shares cover short calls share for share (a covered call needs no margin).
        call_size = (short_size * self._float(self.is_call)).sum(0)
        covered = (self.shares / call_size.clamp_min(1e-12)).clamp(max=1.0)
        call_margin = (requirement * self._float(self.is_call)).sum(0)
        self.margin = requirement.sum(0) - covered * call_margin
        self.greeks = torch.stack([
            (g.delta * size).sum(0) * spot + stock,  # $ change per 100% move (the underlying's delta is 1)
            (g.gamma * size).sum(0) * spot * spot * 1e-4,  # $ change in delta-$ per 1% move, squared
            (g.vega * size).sum(0) * 0.01,  # $ per vol point
            (g.theta * size).sum(0) / DAYS_PER_YEAR,  # $ per calendar day
        ])

    # ------------------------------------------------------------------ observation

    def _observe(self) -> Observation:
        self._mask = valid_actions(self)  # judged at t's close; a new tensor each step, never changed after
        return Observation(portfolio_features(self), self._mask, self.row, self.t == self.t_start, self.windows)

    def windows(self, rows: Tensor) -> Tensor:
        """Feature windows (..., TW, F) ending at flat bar indices ``rows`` (from ``Observation.row``).

        A window is TW consecutive rows of the feature table, i.e. one contiguous block: a strided view
        with one (overlapping) row per window start turns the gather into N block copies, 3x faster
        than gathering N x TW single rows, and with no window table in memory.
        """
        return self._window_starts.index_select(0, (rows - (self.window - 1)).reshape(-1)).view(
            *rows.shape, self.window, -1)

    def action_mask(self) -> Tensor:
        return self._mask.clone()
