"""N independent options-trading copies stepped at once as tensors on one device: a
shell over the pure step.

The market's rules and the step itself are in ``env/step.py`` (and the orders, accounting and
observation it calls); this object holds one ``EnvState``, hands it and the action to the step, and
wraps what comes back into an ``Observation``. What it adds is host-side: checks on user input,
booking a user's positions, checkpoints, and (``records=True``) each ended episode's statistics and
equity curve, read on the host at the step it ends. The trainer runs with ``records=False``: no host
sync per step, episode figures summed on the device and read once per update
(``take_episode_sums``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial

import numpy as np
import torch
from torch import Tensor
from torch.utils._pytree import tree_map_only

from clstm_ppo.config import EnvConfig, MarketConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.windows import MarketWindows
from clstm_ppo.env import step as pure
from clstm_ppo.env.accounting import cash_room, free_cover, mark_to_market
from clstm_ppo.env.episodes import episode_records, take_finished
from clstm_ppo.env.observation import BookedPosition, Observation, StepResult, portfolio_features
from clstm_ppo.env.quotes import at_rows
from clstm_ppo.env.scaled import ScaleChoices, ScaledRule
from clstm_ppo.env.state import (
    SPEC_FIELDS,
    STATE_FIELDS,
    EnvSpec,
    EnvState,
    empty_state,
    flat_row,
    make_spec,
)


class BatchedOptionsEnv:
    def __init__(
        self,
        data: MarketData,
        split: str,
        market: MarketConfig,
        cfg: EnvConfig,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
        autoreset: bool = True,
        records: bool = True,
        compile: str = "off",
        cuda_graphs: bool = False,
        symbol_weights: list[float] | None = None,
        scaled: ScaledRule | None = None,
        slot_pnl: bool = False,
    ):
        """``scaled``: the copies take a ``scale`` agent's multiples of this rule's orders
        (``env/scaled.py``); ``actions`` is then what the agent chooses among, and ``spec.actions``
        the chain the rule orders from. ``slot_pnl``: each step also books every slot's P&L
        (``EnvState.slot_pnl``: ppo.credit position)."""
        self.market_windows = MarketWindows(data, split, device)  # checks the split's name first
        self.device = torch.device(device)
        self.compiled = compile == "on" or (compile == "auto" and self.device.type == "cuda")
        # Eager on a CPU a host sync is free: closes then price only the
        # copies that close (``orders``).
        gather = not self.compiled and self.device.type == "cpu"
        self.spec = make_spec(
            data,
            self.market_windows,
            market,
            cfg,
            num_envs,
            self.device,
            autoreset,
            gather,
            symbol_weights,
            scaled,
            slot_pnl,
        )
        self.dtype, self.market_cfg, self.cfg = self.spec.dtype, market, cfg
        self.actions = self.spec.actions if scaled is None else ScaleChoices(scaled)
        if cfg.max_order_notional > 0 and market.sizing == "whole":
            # a cap below one whole contract leaves a
            # stock-only agent: say so, not silently (fractional orders fit under any cap)
            one = (
                float(np.min(data.bars["close"][:, self.spec.first_bar : self.spec.split_end]))
                * market.multiplier
            )
            if cfg.max_order_notional * cfg.initial_cash < one:
                warnings.warn(
                    f"env.max_order_notional {cfg.max_order_notional:g} x env.initial_cash "
                    f"{cfg.initial_cash:,.0f} is below one contract's notional ({one:,.0f} at the "
                    f"lowest close of the {split} split): no option order fits until "
                    "equity grows; raise either",
                    stacklevel=2,
                )
        self.num_envs, self.autoreset, self.records = num_envs, autoreset, records
        self.staggered, self.quotes, self.max_len = (
            self.spec.staggered,
            self.spec.quotes,
            self.spec.max_len,
        )
        self.dates = data.dates.values
        # the split's bounds and the table's shape, as the env's clock reads them
        w = self.market_windows
        self.window, self.n_symbols, self.n_bars = w.window, w.n_symbols, w.n_bars
        self.split_start, self.split_end, self.first_bar = w.split_start, w.split_end, w.first_bar
        self.state = empty_state(self.spec, seed)
        # Records need the state before the restart (``keep_ended``); the
        # trainer's step never returns it.
        # graphs replay on CUDA only
        self.cuda_graphs = cuda_graphs and self.compiled and self.device.type == "cuda"
        self._step = (
            pure.compiled_step(self.spec, autoreset, records, self.cuda_graphs)
            if self.compiled
            else _eager_step(self.spec, autoreset, records)
        )
        # Each copy's equity at every bar of its episode, for the records' curves (host tools only).
        self.equity_curve = (
            torch.zeros(num_envs, self.max_len + 1, dtype=self.dtype, device=self.device)
            if records
            else None
        )

    def __getattr__(self, name: str):
        """The state's tensors and the spec's tables read as attributes (``env.cash``,
        ``env.stats["closed"]``, ``env.turbulent_bar``)."""
        if name in STATE_FIELDS:
            return getattr(self.__dict__["state"], name)
        if name in SPEC_FIELDS:
            return getattr(self.__dict__["spec"], name)
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    @property
    def row(self) -> Tensor:
        """(N,) flat index sym * T + t of each copy's current bar."""
        return flat_row(self.spec, self.state)

    def episode_end(self, start: Tensor) -> Tensor:
        return self.spec.episode_end(start)

    # ------------------------------------------------------------------ reset

    def reset(self, starts: Tensor | None = None) -> Observation:
        """Start every copy afresh: at random bars, or at ``starts`` (copy i on underlying i mod S).

        Random starts of a ``staggered`` env get first episodes of random length (``step.stagger``);
        ``starts`` get full-length episodes. A copy started on the split's last bar can be observed
        (``python -m clstm_ppo.predict``), not stepped.
        """
        s = self.state.working_copy()
        if starts is not None:
            starts = starts.to(self.device).long()
            first = self.first_bar
            if (
                starts.shape != (self.num_envs,)
                or (starts < first).any()
                or (starts > self.split_end - 1).any()
            ):
                raise ValueError(
                    f"starts must be {self.num_envs} bars in [{first}, {self.split_end - 1}]"
                )
            pure.restart_at(self.spec, s, starts)
        else:
            pure.restart(self.spec, s, torch.ones_like(s.t, dtype=torch.bool))
            if self.staggered:
                pure.stagger(s)
        self.state = pure.observe(self.spec, s)
        if self.equity_curve is not None:
            self.equity_curve.zero_()
            self.equity_curve[:, 0] = self.cfg.initial_cash
        return self.observation()

    def book(self, positions: list[BookedPosition]) -> Observation:
        """Put ``positions`` into copy 0's empty book at its current bar, as bought before it for
        ``paid`` out of the initial cash (or sold for ``paid`` into it), mark them at the bar's
        close and observe again: the portfolio a user already holds."""
        s = self.state.working_copy()
        if len(positions) > self.cfg.max_positions or s.active[:, 0].any():
            raise ValueError(
                f"book at most env.max_positions ({self.cfg.max_positions}) "
                "positions, into an empty book"
            )
        t = int(s.t[0])
        fields = {
            name: getattr(s, name).clone()
            for name in (
                "active",
                "is_call",
                "short",
                "strike",
                "contracts",
                "entry_cost",
                "expiry_bar",
                "expiry_time",
                "cash",
            )
        }
        for slot, p in enumerate(positions):
            bar, time = self.expiry_of(p.expiry, t)
            if bar <= t:
                raise ValueError(
                    f"a position expiring {p.expiry} has expired by the data's last bar"
                )
            # what the account paid for it (a sale: minus what it brought in)
            flow = -p.paid if p.short else p.paid
            for name, value in (
                ("active", True),
                ("is_call", p.is_call),
                ("short", p.short),
                ("strike", p.strike),
                ("contracts", p.contracts),
                ("entry_cost", flow),
                ("expiry_bar", float(bar)),
                ("expiry_time", time),
            ):
                fields[name][slot, 0] = value
            fields["cash"][0] -= flow
        for name, value in fields.items():
            setattr(s, name, value)
        row = flat_row(self.spec, s)
        mark_to_market(self.spec, s, at_rows(self.quotes.close_px, row), row)
        s.peak = torch.maximum(s.peak, s.equity)
        self.state = pure.observe(self.spec, s)
        return self.observation()

    def expiry_of(self, expiry: np.datetime64, t: int) -> tuple[int, float]:
        """(bar, time in days) at which an option listed to expire on calendar day ``expiry``
        settles, seen from bar ``t``: the last bar on or before that day, or past the data (bar T,
        time by the calendar)."""
        dates, close_time = self.dates.astype("datetime64[D]"), self.quotes.close_time
        day = np.datetime64(expiry, "D")
        if day > dates[-1]:
            return self.n_bars, float(close_time[t]) + float(
                (day - dates[t]) / np.timedelta64(1, "D")
            )
        bar = int(np.searchsorted(dates, day, side="right") - 1)
        return bar, float(close_time[bar])

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """Every state tensor on the CPU: what an exact resume needs (the random streams are
        the state's own)."""
        return {
            name: (
                {k: v.detach().cpu() for k, v in value.items()}
                if isinstance(value, dict)
                else value.detach().cpu()
            )
            for name, value in self.state.to_dict().items()
        }

    def fits(self, saved: dict) -> bool:
        """Whether ``saved`` (from ``state_dict``) has this env's fields, copies, slots and
        layout. A field that ``saved`` lacks fits where this env keeps nothing in it: a state
        saved before the field existed (the Sharpe ratio moments, empty under any reward but dsr)
        resumes as it ran."""
        mine = {
            name: value
            for name, value in self.state.to_dict().items()
            if name in saved or kept(value)
        }
        if not all(name in saved for name in mine) or set(saved["stats"]) != set(mine["stats"]):
            return False
        flat = lambda d: {  # noqa: E731
            **{k: v for k, v in d.items() if k != "stats"},
            **d["stats"],
        }
        theirs = flat(saved)
        return all(
            tuple(theirs[k].shape) == tuple(v.shape) and theirs[k].dtype == v.dtype
            for k, v in flat(mine).items()
        )

    def load_state_dict(self, saved: dict) -> None:
        if not self.fits(saved):
            raise ValueError(
                "saved env state does not fit this env (other --num-envs, max_positions, "
                "episode length, env.reward dsr on one side only, or an older layout)"
            )
        fields = {
            name: (saved[name] if name in saved else getattr(self.state, name)).to(self.device)
            for name in STATE_FIELDS
            if name != "stats"
        }  # one it lacks is empty here (``fits``)
        self.state = EnvState(
            **fields, stats={k: v.to(self.device) for k, v in saved["stats"].items()}
        )

    def take_episode_sums(self) -> np.ndarray:
        """Sums over every copy of the full-length episodes finished since the last call
        (``state.EPISODE_SUMS``): one host copy, at an update boundary."""
        sums, self.state = take_finished(self.state)
        return sums

    # ------------------------------------------------------------------ step

    def step(self, action: Tensor) -> StepResult:
        if self.cuda_graphs:
            # a new replay may overwrite the last one's outputs: every one kept is a copy (below)
            torch.compiler.cudagraph_mark_step_begin()
        out = self._step(self.state, action.to(self.device).long())
        if self.cuda_graphs:  # the state, and the observation a rollout stores after the next step
            out = tree_map_only(Tensor, Tensor.clone, out)
        self.state = out.state
        episodes = self._record(out) if self.records else None
        obs = Observation(out.portfolio, out.state.mask, out.row, out.start, self.market_windows)
        return StepResult(obs, out.reward, out.terminated, out.truncated, episodes)

    def _record(self, out: pure.StepOutput) -> dict[str, np.ndarray] | None:
        """Write the step's equity into the curves and read the ended episodes'
        records (host syncs)."""
        ended, curve = out.ended, self.equity_curve
        steps = (ended.t - ended.t_start).clamp(max=self.max_len)
        curve.view(-1).index_copy_(0, self.spec.copy_ids * (self.max_len + 1) + steps, ended.equity)
        idx = torch.nonzero(out.terminated | out.truncated).squeeze(-1)
        if idx.numel() == 0:
            return None
        episodes = episode_records(self.spec, ended, idx, curve)
        if self.autoreset:
            curve.index_fill_(0, idx, 0)
            curve[:, 0].index_fill_(0, idx, self.cfg.initial_cash)
        return episodes

    # ------------------------------------------------------------------ observation

    def observation(self, portfolio: Tensor | None = None) -> Observation:
        """The copies' observation from their state as it stands (the mask their last step judged).
        ``portfolio``: the features that step returned, e.g. a checkpoint's; computed here
        otherwise. A trainer resuming a compiled env passes them, since this eager code sums in
        another order than the compiled step did."""
        s = self.state
        return Observation(
            portfolio_features(self.spec, s) if portfolio is None else portfolio.to(self.device),
            s.mask,
            flat_row(self.spec, s),
            s.t == s.t_start,
            self.market_windows,
        )

    def observe(self) -> Observation:
        """The copies' observation at their current bar (t's close), the mask judged afresh."""
        self.state = pure.observe(self.spec, self.state.working_copy())
        return self.observation()

    def cash_room(self) -> Tensor:
        """(N,) cash a new order may spend (``accounting.cash_room``)."""
        return cash_room(self.spec, self.state)

    def free_cover(self) -> Tensor:
        """(N,) call contracts the shares could still cover (``accounting.free_cover``)."""
        return free_cover(self.spec, self.state)

    def action_mask(self) -> Tensor:
        return self.state.mask.clone()


def kept(value: Tensor | dict[str, Tensor]) -> bool:
    """Whether a state field holds anything (the stats, a dict, always count)."""
    return isinstance(value, dict) or value.numel() > 0


def _eager_step(
    spec: EnvSpec, autoreset: bool, keep_ended: bool
) -> Callable[[EnvState, Tensor], pure.StepOutput]:
    """``step`` bound to ``spec``, run op by op (``compiled_step``'s eager twin). Under inference
    mode: no step output is ever differentiated, and skipping autograd's bookkeeping on each of its
    hundreds of operators makes an eager CPU step faster (docs/BENCHMARKS.md, "The eager step under
    inference mode")."""
    return torch.inference_mode()(
        partial(pure.step, spec, autoreset=autoreset, keep_ended=keep_ended)
    )
