"""Every cost of an order, itemised: spread, slippage and the five fees (docs/MARKET.md).

Fills: buy at ask, sell at bid, around the Black-Scholes mid. The half spread
is paid on each side, so a round trip pays the full quoted spread once. With a
tick grid the ask rounds up and the bid down to it, so a quote is at least one
tick wide and an option worth less than a tick bids nothing.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from clstm_ppo.config import CostConfig, MarketConfig
from clstm_ppo.market.margin import index_rules

# The first seven are an option order's; "shares" is trading the underlying
# (share_cost_bps of the notional).
COST_KINDS = (
    "spread",
    "slippage",
    "commission",
    "occ_clearing",
    "finra_taf",
    "sec_fee",
    "orf",
    "shares",
)
OPTION_COST_KINDS = len(COST_KINDS) - 1


class Ticks(NamedTuple):
    """The quote grid: ``small`` below ``boundary`` dollars a share, ``large`` at and above it
    (tensors that broadcast against the mids they round, e.g. one per underlying; 0 leaves that
    quote off the grid)."""

    small: Tensor | float
    large: Tensor | float
    boundary: float


def tick_sizes(broad_index: np.ndarray | None, n_symbols: int, cfg: MarketConfig) -> np.ndarray:
    """(S, 2) quote increments (below, at and above ``costs.tick_break``) per underlying: an index's
    or a stock's, by the rule that also picks the margin rates (``margin.index_rules``)."""
    index = index_rules(broad_index, n_symbols, cfg)
    return np.where(
        index[:, None], np.asarray(cfg.costs.index_ticks), np.asarray(cfg.costs.stock_ticks)
    )


class Fill(NamedTuple):
    price: Tensor  # per share, after spread and slippage
    # (len(COST_KINDS), ...) dollars per kind: kinds first, so stacking and slicing stay contiguous
    costs: Tensor
    total: Tensor  # dollars: sum of costs


def quoted_spread(mid: Tensor, iv: Tensor, log_moneyness: Tensor, cfg: CostConfig) -> Tensor:
    """Full bid-ask spread as a share of mid: wider for cheap, far-from-money and
    high-vol options."""
    cheap = (1.0 - mid / cfg.spread_cheap_price).clamp(0.0, 1.0) * cfg.spread_cheap_coef
    far = log_moneyness.abs() * cfg.spread_moneyness_coef
    stormy = (iv - 0.20).clamp_min(0.0) * cfg.spread_vol_coef
    return (cfg.spread_base * (1.0 + cheap) * (1.0 + far) * (1.0 + stormy)).clamp(
        cfg.spread_min, cfg.spread_max
    )


def half_spread(mid: Tensor, iv: Tensor, log_moneyness: Tensor, cfg: CostConfig) -> Tensor:
    """Half the quoted spread as a share of mid: what each side of a round trip pays."""
    return 0.5 * quoted_spread(mid, iv, log_moneyness, cfg)


# a sale (True) or a purchase; a tensor of 0/1 floats gives each order its own side
Side = bool | Tensor


def fill_price_at(
    mid: Tensor,
    contracts: Tensor,
    is_sell: Side,
    half: Tensor,
    option_volume: Tensor,
    cfg: CostConfig,
    ticks: Ticks | None = None,
    quote: Tensor | None = None,
) -> Tensor:
    """Per-share price of an order after ``half`` the quoted spread (a share of mid, known: the env
    quotes each bar's chain once), rounded out to ``ticks`` (or at ``quote``, that rounding done
    once already by ``side_quote``), and the size-driven slippage."""
    return _priced(mid, is_sell, half, slippage(contracts, option_volume, cfg), ticks, quote)[0]


def side_quote(mid: Tensor, is_sell: Side, half: Tensor, ticks: Ticks | None) -> Tensor | None:
    """The bid (a sale) or ask on the tick grid, for an order priced several times at several sizes;
    None without a grid."""
    return (
        None
        if ticks is None
        else on_ticks(mid * (1.0 + _direction(is_sell) * half), is_sell, ticks)
    )


def _direction(is_sell: Side) -> float | Tensor:
    """+1 for a buy (the price moves up from mid), -1 for a sale."""
    return (-1.0 if is_sell else 1.0) if isinstance(is_sell, bool) else 1.0 - 2.0 * is_sell


def _priced(
    mid: Tensor,
    is_sell: Side,
    half: Tensor,
    impact: Tensor,
    ticks: Ticks | None,
    quote: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(price, spread paid, slippage paid), per share: mid moved against the trader by ``half`` of
    mid to the quote, the quote rounded out to the tick grid (``quote``, where given), then by
    ``impact`` of mid; a sale never below 0."""
    direction = _direction(is_sell)
    if ticks is None:  # a setting, not a tensor: no branch in the compiled graph
        return mid * (1.0 + direction * (half + impact)), mid * half, mid * impact
    if quote is None:
        quote = side_quote(mid, is_sell, half, ticks)
    price = (quote + direction * mid * impact).clamp_min(0.0)
    return price, direction * (quote - mid), direction * (price - quote)


def on_ticks(raw: Tensor, is_sell: Side, ticks: Ticks) -> Tensor:
    """A quote rounded out to the tick grid: an ask up (one tick at least, however little the option
    is worth), a bid down (to 0 below one tick). The grid is the small tick below
    ``ticks.boundary``; a rounding error of 1e-4 tick never moves a quote that sits on the grid."""
    small, large = (
        torch.as_tensor(x, dtype=raw.dtype, device=raw.device) for x in (ticks.small, ticks.large)
    )
    tick = torch.where(raw < ticks.boundary, small, large)
    on_grid = tick > 0
    steps = raw / torch.where(on_grid, tick, 1.0)
    # 0/1 floats: lerp picks exactly
    sell = is_sell if isinstance(is_sell, Tensor) else float(is_sell)
    # no one sells an option for nothing: at least one tick
    ask = torch.ceil(steps - 1e-4).clamp_min(1.0)
    rounded = torch.lerp(ask, torch.floor(steps + 1e-4), sell) * tick
    return torch.where(on_grid, rounded, raw)


def strike_volume(
    base: Tensor, log_k_over_s: Tensor, years: Tensor, cfg: CostConfig, atm_years: float
) -> Tensor:
    """Option-volume proxy of one strike: ``base`` (the at-the-money volume of a <= ``atm_years``
    option) falls by e per ``volume_moneyness_width`` of |ln(K/S)| and as (atm_years / T) ^ power
    beyond atm_years."""
    far = torch.exp(log_k_over_s.abs() * (-1.0 / cfg.volume_moneyness_width))
    longer = (atm_years / years.clamp_min(atm_years)) ** cfg.volume_expiry_power
    return (base * far * longer).clamp_min(cfg.min_option_volume)


def slippage(contracts: Tensor, option_volume: Tensor, cfg: CostConfig) -> Tensor:
    """Size-driven price impact as a share of mid, capped."""
    return (cfg.slippage_coef * contracts / option_volume).clamp(max=cfg.max_slippage)


def order_fill(
    mid: Tensor,
    contracts: Tensor,
    is_sell: Side,
    iv: Tensor,
    log_moneyness: Tensor,
    option_volume: Tensor,
    cfg: CostConfig,
    multiplier: int,
    ticks: Ticks | None = None,
) -> Fill:
    """Fill price and itemised costs of buying (``is_sell=False``) or selling
    ``contracts`` at ``mid``.

    ``contracts`` may be 0 (no order): every cost is then 0.
    """
    return order_fill_at(
        mid,
        contracts,
        is_sell,
        half_spread(mid, iv, log_moneyness, cfg),
        option_volume,
        cfg,
        multiplier,
        ticks,
    )


def order_fill_at(
    mid: Tensor,
    contracts: Tensor,
    is_sell: Side,
    half: Tensor,
    option_volume: Tensor,
    cfg: CostConfig,
    multiplier: int,
    ticks: Ticks | None = None,
    quote: Tensor | None = None,
) -> Fill:
    """``order_fill`` with the half spread (and, on a tick grid, perhaps the quote) already known.
    Costs by kind: every COST_KINDS row, "shares" 0."""
    price, spread, slipped = _priced(
        mid, is_sell, half, slippage(contracts, option_volume, cfg), ticks, quote
    )
    shares = contracts * multiplier
    traded = _orders(contracts)
    zero = torch.zeros_like(mid)
    sold = (
        contracts * is_sell if not isinstance(is_sell, bool) else (contracts if is_sell else zero)
    )
    costs = torch.stack(
        [
            spread * shares,
            slipped * shares,
            torch.maximum(
                cfg.commission_per_contract * contracts, cfg.commission_min_per_order * traded
            ),
            cfg.occ_clearing_per_contract * contracts,
            cfg.finra_taf_per_contract * sold,  # sales only
            price * sold * (multiplier * cfg.sec_fee_per_million / 1e6),  # sales only
            cfg.orf_per_contract * contracts,
            zero,
        ]
    )
    return Fill(price, costs, costs.sum(0))


def _orders(contracts: Tensor) -> Tensor:
    """1 where an order (or position) has contracts, else 0: whole or fractional (a 0.3-contract
    order pays the whole per-order minimum)."""
    return (contracts > 0).to(contracts.dtype)


def fees_only(fill: Fill) -> Tensor:
    """The cash fees of a fill (the spread and slippage are already inside its price)."""
    return fill.costs[2:OPTION_COST_KINDS].sum(0)


def round_trip_fees_one_contract(cfg: CostConfig) -> float:
    """Fees of buying one contract plus the closing-fee reserve it needs (SEC fee aside): an order
    of one contract pays the per-order commission minimum."""
    return _round_trip_fees(max(cfg.commission_per_contract, cfg.commission_min_per_order), cfg)


def round_trip_fees_per_contract(cfg: CostConfig) -> float:
    """Fees per contract of opening and later closing an order (SEC fee and the per-order minimum
    aside, which the cash room keeps back once per order: ``round_trip_order_minimum``)."""
    return _round_trip_fees(cfg.commission_per_contract, cfg)


def _round_trip_fees(commission: float, cfg: CostConfig) -> float:
    opening = commission + cfg.occ_clearing_per_contract + cfg.orf_per_contract
    return 2 * opening + cfg.finra_taf_per_contract  # closing pays the same plus the TAF on sales


def round_trip_order_minimum(cfg: CostConfig) -> float:
    """The commission minimums of opening one more order and later closing it: cash a new
    order keeps back."""
    return 2 * cfg.commission_min_per_order


def closing_fee_reserve(contracts: Tensor, cfg: CostConfig) -> Tensor:
    """An upper bound on the per-contract fees of selling ``contracts`` later, SEC fee aside.

    Cash is kept at or above the reserve of every open position, so closing one
    (whose SEC fee is a fraction of its own proceeds) never drives cash negative.
    """
    per_contract = cfg.occ_clearing_per_contract + cfg.finra_taf_per_contract + cfg.orf_per_contract
    commission = torch.maximum(
        cfg.commission_per_contract * contracts, cfg.commission_min_per_order * _orders(contracts)
    )
    return commission + per_contract * contracts


def share_cost_rate(cfg: CostConfig) -> float:
    """Cost of trading the underlying as a share of the notional traded."""
    return cfg.share_cost_bps * 1e-4


def share_fees(notional: Tensor, cfg: CostConfig) -> Tensor:
    """Dollars paid to trade ``notional`` dollars of the underlying, either way."""
    return notional * share_cost_rate(cfg)


def share_price_with_fees(price: Tensor, cfg: CostConfig) -> Tensor:
    """What buying one share at ``price`` takes out of cash, its cost included."""
    return price * (1.0 + share_cost_rate(cfg))


def base_option_volume(
    volume: np.ndarray | None, shape: tuple[int, ...], cfg: CostConfig
) -> np.ndarray:
    """At-the-money option-volume proxy of each bar: a share of the underlying's volume with a
    floor, or the floor where the data has no volume."""
    if volume is None:
        return np.full(shape, cfg.min_option_volume)
    return np.maximum(volume * cfg.option_volume_ratio, cfg.min_option_volume)
