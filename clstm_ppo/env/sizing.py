"""How big an order is: whole contracts and shares (floored) or fractional ones (``market.sizing``),
the smallest order that counts, and which limits one offered option order fits at a bar (the mask's,
and the untradable account's check in ``env/tradability.py``).

docs/MARKET.md, "Sizing", states the rules. Everything here is a function of the spec and tensors;
the sizing is a setting, not a tensor, so a compiled step has no branch on it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from clstm_ppo.env.state import EnvSpec
from clstm_ppo.market.costs import round_trip_fees_one_contract, round_trip_fees_per_contract

# A fractional order (or a change of the shares held) worth under this share of equity in notional
# is no order: rounding leaves dust such as 1e-14 contracts of free cover, which must neither fill a
# slot nor pay a minimum. A share of equity keeps the rule scale-free.
DUST_SHARE = 1e-6
# Shares within this share of the short calls' count cover them all: a covered call sold on
# fractional shares rounds, and a dust of margin would make negative cash a margin call.
COVER_ROUNDING = 1e-9


def whole(spec: EnvSpec) -> bool:
    """Whether orders come in whole contracts and shares (``market.sizing: whole``)."""
    return spec.market.sizing == "whole"


def units(spec: EnvSpec, size: Tensor) -> Tensor:
    """``size`` (contracts or shares) as the account may hold it: floored to whole
    ones, or as it is."""
    return torch.floor(size) if whole(spec) else size


def smallest(spec: EnvSpec, equity: Tensor, unit_notional: Tensor) -> Tensor:
    """The fewest contracts (or shares) an order may have, each worth ``unit_notional`` dollars of
    the underlying: one, or fractional orders' dust limit."""
    if whole(spec):
        return torch.ones_like(equity)
    return DUST_SHARE * equity.clamp_min(0) / unit_notional.clamp_min(1e-12)


class OrderFits(NamedTuple):
    """(N, 2G) bool per option order of one side (calls then puts): which limits the smallest order
    fits at a close, a free slot and a calm bar aside."""

    budget: Tensor  # position_frac of equity carries it (premium for a buy, margin for a sale)
    room: Tensor  # the cash room pays for it (premium or margin less the bid, and the fees)
    # its notional is within env.max_order_notional of equity (all True without a cap)
    notional: Tensor


def order_fits(
    spec: EnvSpec,
    equity: Tensor,
    room: Tensor,
    spot: Tensor,
    ask: Tensor,
    bid: Tensor,
    margin: Tensor,
    selling: bool,
) -> OrderFits:
    """Which limits the smallest buy (``selling`` False) or naked sale of each chain option fits,
    for accounts of ``equity`` and cash ``room`` (N,) at a close ``spot`` (N,). ``ask``, ``bid``,
    ``margin``: (N, 2G) dollars per contract (``quotes.Quotes.close_ask`` etc.)."""
    cfg, mult = spec.cfg, spec.market.multiplier
    least = smallest(spec, equity, spot * mult).unsqueeze(-1)
    # A lone whole contract pays the per-order commission minimum; a fractional order's
    # minimum is kept back in the cash room once per order (``accounting.cash_room``), so each
    # contract pays only its own fees.
    fees = (
        round_trip_fees_one_contract(spec.market.costs)
        if whole(spec)
        else round_trip_fees_per_contract(spec.market.costs)
    )
    budget = (cfg.position_frac * equity).unsqueeze(-1)
    room = room.unsqueeze(-1)
    if selling:
        fits_budget = margin * least <= budget
        fits_room = (margin - bid + fees) * least <= room
    else:
        # whole contracts: the ask with its fees within the budget, as the mask always judged a buy
        fits_budget = (ask + fees if whole(spec) else ask) * least <= budget
        fits_room = (ask + fees) * least <= room
    if cfg.max_order_notional > 0:
        fits_cap = (spot * mult).unsqueeze(-1) * least <= cfg.max_order_notional * equity.unsqueeze(
            -1
        )
    else:
        fits_cap = torch.ones_like(fits_budget)
    return OrderFits(fits_budget, fits_room, fits_cap.expand_as(fits_budget))
