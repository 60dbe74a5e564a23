"""The option chain a bar offers: a moneyness x expiry grid with strikes rounded
to a strike step."""

from __future__ import annotations

import torch
from torch import Tensor

from clstm_ppo.config import MarketConfig

NICE_STEPS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0)
AUTO_STEP_SHARE = 0.005  # auto strike step: the largest nice step at or below 0.5% of spot


def strike_step(spot: Tensor, cfg: MarketConfig) -> Tensor:
    if cfg.strike_step > 0:
        return torch.full_like(spot, cfg.strike_step)
    steps = torch.tensor(NICE_STEPS, dtype=spot.dtype, device=spot.device)
    index = (torch.searchsorted(steps, AUTO_STEP_SHARE * spot, right=True) - 1).clamp_min(0)
    return steps[index]


def chain_strikes(spot: Tensor, moneyness: Tensor, cfg: MarketConfig) -> Tensor:
    """Listed strike nearest to spot x moneyness (never below one step)."""
    step = strike_step(spot, cfg)
    return (torch.round(spot * moneyness / step) * step).clamp_min(step)
