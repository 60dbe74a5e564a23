"""The env's two halves: ``EnvSpec``, what never changes while copies step (the market's per-bar
tables, the settings, the layout), and ``EnvState``, every tensor that does, as fixed-shape
tensors in a pytree.

The step (``env/step.py``) is a pure function of (spec, state, action): it takes a state and returns
a new one, changing no tensor in place, so it compiles as one graph
(``torch.compile(fullgraph=True)``) and is captured in a CUDA graph the same way on every device.
Inside a step the functions of ``orders.py``, ``accounting.py`` and ``observation.py`` rebind fields
of a ``working_copy`` of the state; the caller's state is never touched.

Layout, chosen for speed on CPU and GPU alike: per-copy values are (N,) vectors; positions are
slot-major (P, N), so a copy's sum over its slots is P-1 contiguous vector adds; costs by kind are
(K, N); bar series are read at a copy's flat row sym * T + t with one index_select
(``quotes.at_rows``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor
from torch.utils._pytree import register_dataclass

from clstm_ppo.config import CHOICES, EnvConfig, MarketConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.windows import MarketWindows
from clstm_ppo.env.actions import ActionSpace
from clstm_ppo.env.draws import copy_keys
from clstm_ppo.env.quotes import Quotes, build_quotes
from clstm_ppo.market import COST_KINDS

if TYPE_CHECKING:  # scaled.py reads the observation's features, which read this module
    from clstm_ppo.env.scaled import ScaledRule

# Per copy, summed over its episode; margin_calls counts the bars whose close left the short margin
# uncovered; option_pnl is closed and settled options' own P&L, every cost included (the
# underlying's P&L is not in it).
STAT_NAMES = (
    "reward",
    "closed",
    "wins",
    "invalid",
    "rejected",
    "traded",
    "margin_calls",
    "option_pnl",
)
# Sums over a copy's finished full-length episodes since they were last read
# (``EnvState.finished``): what the trainer logs at each update boundary, read once there
# instead of once per ended episode.
EPISODE_SUMS = (
    "episodes",
    "reward",
    "return",
    "return_pct",
    "closed",
    "wins",
    "open",
    "steps",
    "profitable",
    *(f"cost_{kind}" for kind in COST_KINDS),
)


@dataclass(frozen=True, eq=False)
class EnvSpec:
    """What a step reads but never changes: settings, layout and the per-bar market
    tables on the device."""

    cfg: EnvConfig
    market: MarketConfig
    actions: ActionSpace
    num_envs: int
    dtype: torch.dtype
    device: torch.device
    quotes: Quotes
    turbulent_bar: Tensor  # (T,) bool, known at t's close
    stock_targets: Tensor  # (len(targets),)
    # (K, 1) one-hot of the "shares" cost kind: a share trade's fees go there
    share_cost_row: Tensor
    # (P, 1) ranks P..1: the first slot of a column ranks highest (``orders.first_slot``)
    slot_rank: Tensor
    copy_ids: Tensor  # (N,) long
    n_symbols: int
    n_bars: int
    first_bar: int  # the split's first bar with a complete window
    split_end: int  # one past the split's last bar
    max_len: int  # bars of the longest episode
    staggered: bool  # first episodes get random lengths (``step.stagger``)
    # (S,) float64 cumulative chance of each underlying at a random start; None: uniform
    symbol_cdf: Tensor | None
    # price only the closing copies (a host sync): eager on a CPU only (``orders.close_options``)
    gather_closes: bool
    # agent.actions scale: the rule whose orders the action multiplies (``scaled.py``)
    scaled: ScaledRule | None = None
    # each step also books every slot's P&L (``EnvState.slot_pnl``), for ppo.credit position
    slot_pnl: bool = False

    @property
    def choices(self) -> int:
        """How many actions the agent chooses among: the chain's, or the rule's multiples."""
        return self.actions.n if self.scaled is None else len(self.scaled.multiples)

    def episode_end(self, start: Tensor) -> Tensor:
        """The last bar of a full-length episode begun at ``start``: ``env.episode_length`` bars
        on, capped at the split's last bar (which is the end, whatever the start, with
        episode_length 0)."""
        last_bar = self.split_end - 1
        if self.cfg.episode_length <= 0:
            return torch.full_like(start, last_bar)
        return (start + self.cfg.episode_length).clamp(max=last_bar)

    @property
    def latest_start(self) -> int:
        """The last bar a random full-length episode may start on."""
        if self.cfg.episode_length <= 0:
            return self.first_bar
        return max(self.first_bar, self.split_end - 1 - self.cfg.episode_length)


SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(EnvSpec))


def make_spec(
    data: MarketData,
    windows: MarketWindows,
    market: MarketConfig,
    cfg: EnvConfig,
    num_envs: int,
    device: torch.device,
    autoreset: bool,
    gather_closes: bool,
    symbol_weights: list[float] | None = None,
    scaled: ScaledRule | None = None,
    slot_pnl: bool = False,
) -> EnvSpec:
    """The spec of ``num_envs`` copies on ``windows``' split of ``data``; ``symbol_weights`` (one
    per underlying, any positive scale) weight the underlyings a random start draws, uniform without
    them; ``scaled``: the rule a ``scale`` agent multiplies (its gate read by ``data``'s flat rows);
    ``slot_pnl``: book each slot's P&L a step."""
    if cfg.dtype not in CHOICES["env.dtype"]:
        raise ValueError(f"env.dtype must be float32 or float64, got {cfg.dtype!r}")
    dtype = getattr(torch, cfg.dtype)
    grid_m = torch.tensor(market.moneyness, dtype=dtype, device=device)
    expiry_index = torch.arange(len(market.expiries_days), device=device).repeat_interleave(
        len(market.moneyness)
    )
    # (G,) per grid point, moneyness fastest; docs/MARKET.md has the rules the tables follow.
    quotes = build_quotes(
        data, market, grid_m.repeat(len(market.expiries_days)), expiry_index, dtype, device
    )
    first, end = windows.first_bar, windows.split_end
    max_len = (
        end - 1 - first if cfg.episode_length <= 0 else min(cfg.episode_length, end - 1 - first)
    )
    p = cfg.max_positions
    return EnvSpec(
        cfg=cfg,
        market=market,
        actions=ActionSpace.from_config(market),
        num_envs=num_envs,
        dtype=dtype,
        device=device,
        quotes=quotes,
        turbulent_bar=torch.as_tensor(
            np.asarray(data.turbulence > data.turbulence_threshold), device=device
        ),
        stock_targets=torch.tensor(market.stock_targets, dtype=dtype, device=device),
        share_cost_row=(
            torch.arange(len(COST_KINDS), device=device) == COST_KINDS.index("shares")
        ).to(dtype)[:, None],
        slot_rank=torch.arange(p, 0, -1, dtype=dtype, device=device).unsqueeze(-1),
        copy_ids=torch.arange(num_envs, device=device),
        n_symbols=windows.n_symbols,
        n_bars=windows.n_bars,
        first_bar=first,
        split_end=end,
        max_len=max_len,
        # A single copy has nothing to spread against, and an env without autoreset (the walks,
        # gymnasium, predict) is stepped episode by episode.
        staggered=cfg.stagger_starts and autoreset and num_envs > 1,
        gather_closes=gather_closes,
        symbol_cdf=None
        if symbol_weights is None
        else symbol_cdf(symbol_weights, windows.n_symbols, device),
        scaled=scaled,
        slot_pnl=slot_pnl,
    )


def symbol_cdf(weights: list[float], n_symbols: int, device: torch.device) -> Tensor:
    """(S,) float64 cumulative shares of ``weights``, the last exactly 1."""
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n_symbols,) or not np.all(np.isfinite(w)) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(
            f"symbol_weights must be {n_symbols} non-negative numbers, not all 0; got {weights!r}"
        )
    cdf = np.cumsum(w / w.sum())
    cdf[-1] = 1.0
    return torch.as_tensor(cdf, device=device)


@dataclass(eq=False)
class EnvState:
    """Every tensor that changes as the copies step: what checkpoints save for an exact resume.

    Empty slots hold no contracts and no cost; their other fields are stale but finite (strike > 0),
    so every slot can be priced without masking its inputs. ``entry_cost`` and ``mark`` are signed:
    what a long cost (+) or a short brought in (-); a long's value (+) or what buying a short back
    would cost (-). P&L is mark - entry_cost either way.
    """

    sym: Tensor  # (N,) long: the underlying
    t: Tensor  # (N,) long: the current bar
    t_start: Tensor  # (N,) long
    t_end: Tensor  # (N,) long: the episode's last bar
    cash: Tensor  # (N,)
    equity: Tensor  # (N,) marked at t's close
    peak: Tensor  # (N,) the episode's highest equity
    shares: Tensor  # (N,) the underlying held
    margin: Tensor  # (N,) the shorts' margin at the last close
    active: Tensor  # (P, N) bool
    is_call: Tensor  # (P, N) bool
    short: Tensor  # (P, N) bool: sold to open; its mark and P&L count against the account
    strike: Tensor  # (P, N)
    expiry_bar: Tensor  # (P, N) the bar whose close settles it (exact integers in the float dtype)
    expiry_time: Tensor  # (P, N) its time in days
    contracts: Tensor  # (P, N)
    entry_cost: Tensor  # (P, N)
    mark: Tensor  # (P, N)
    greeks: Tensor  # (4, N) net delta, gamma, vega, theta in $ terms
    costs_paid: Tensor  # (K, N) this episode's costs by kind
    stats: dict[str, Tensor]  # STAT_NAMES -> (N,) this episode's sums
    # (N, A) bool: the actions valid at t, judged at t's close (A: ``EnvSpec.choices``)
    mask: Tensor
    key: Tensor  # (N,) long: each copy's random stream (``draws.py``)
    draws: Tensor  # (N,) long: how many episode starts each copy has drawn
    # (len(EPISODE_SUMS), N) float64: sums over finished full-length episodes, unread
    finished: Tensor
    # (2, N) under env.reward dsr: the moving mean A and second moment B of the bar's return
    # over the T-bill (``sharpe.py``); (0, N) under any other reward, so a state saved
    # before the field existed still fits.
    sharpe_moments: Tensor
    # With ``EnvSpec.slot_pnl`` (ppo.credit position), the last step's P&L of each slot in dollars:
    # [0] the position the slot held before the step's fill (its mark's change, or what closing or
    # settling it realised less its last mark), [1] the position opened into it at the fill (its
    # first mark less what it cost); (2, 0, N) without.
    slot_pnl: Tensor
    # (P, N) bool: the step's fill opened a position into the slot; (0, N) without
    slot_opened: Tensor

    def working_copy(self) -> EnvState:
        """A new state sharing this one's tensors, whose fields a step may rebind (never
        change in place)."""
        return dataclasses.replace(self, stats=dict(self.stats))

    def to_dict(self) -> dict[str, Tensor | dict[str, Tensor]]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


register_dataclass(EnvState)
STATE_FIELDS = tuple(f.name for f in dataclasses.fields(EnvState))


def empty_state(spec: EnvSpec, seed: int) -> EnvState:
    """Every copy with an empty book and no bar yet: ``step.reset`` or
    ``step.reset_at`` starts them."""
    n, p, dtype, device = spec.num_envs, spec.cfg.max_positions, spec.dtype, spec.device

    def zeros(*shape: int, kind: torch.dtype | None = None) -> Tensor:
        return torch.zeros(*shape, dtype=kind or dtype, device=device)

    long, flag = torch.long, torch.bool
    return EnvState(
        sym=zeros(n, kind=long),
        t=zeros(n, kind=long),
        t_start=zeros(n, kind=long),
        t_end=zeros(n, kind=long),
        cash=zeros(n),
        equity=zeros(n),
        peak=zeros(n),
        shares=zeros(n),
        margin=zeros(n),
        active=zeros(p, n, kind=flag),
        is_call=zeros(p, n, kind=flag),
        short=zeros(p, n, kind=flag),
        strike=torch.ones(p, n, dtype=dtype, device=device),
        expiry_bar=zeros(p, n),
        expiry_time=zeros(p, n),
        contracts=zeros(p, n),
        entry_cost=zeros(p, n),
        mark=zeros(p, n),
        greeks=zeros(4, n),
        costs_paid=zeros(len(COST_KINDS), n),
        stats={k: zeros(n) for k in STAT_NAMES},
        mask=zeros(n, spec.choices, kind=flag),
        key=copy_keys(seed, n, device),
        draws=zeros(n, kind=long),
        finished=zeros(len(EPISODE_SUMS), n, kind=torch.float64),
        sharpe_moments=zeros(2 if spec.cfg.reward == "dsr" else 0, n),
        slot_pnl=zeros(2, p if spec.slot_pnl else 0, n),
        slot_opened=zeros(p if spec.slot_pnl else 0, n, kind=flag),
    )


def flat_row(spec: EnvSpec, s: EnvState) -> Tensor:
    """(N,) flat index sym * T + t of each copy's current bar."""
    return s.sym * spec.n_bars + s.t
