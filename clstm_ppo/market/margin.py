"""Margin for short options (Cboe / FINRA rule 4210 style), per share of the option.

    max(premium + a x spot - out-of-the-money amount,
        premium + b x (strike for a put, spot for a call))

with (a, b) = (15%, 10%) for broad-based indices and (20%, 10%) for single stocks. The
premium is the option's current value, so the requirement moves with the market; the sale's
proceeds count toward it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from clstm_ppo.config import MarketConfig
from clstm_ppo.market.flags import as_float


def index_rules(broad_index: np.ndarray | None, n_symbols: int, cfg: MarketConfig) -> np.ndarray:
    """(S,) bool: which underlyings trade under index rules (margin rates, quote ticks), by
    ``margin_style``."""
    if cfg.margin_style != "auto":
        return np.full(n_symbols, cfg.margin_style == "index")
    return (
        np.zeros(n_symbols, dtype=bool)
        if broad_index is None
        else np.asarray(broad_index, dtype=bool)
    )


def margin_rates(broad_index: np.ndarray | None, n_symbols: int, cfg: MarketConfig) -> np.ndarray:
    """(S, 2) rates (a, b) per underlying: index rates for broad-based indices,
    stock rates otherwise."""
    index = index_rules(broad_index, n_symbols, cfg)
    return np.where(index[:, None], np.asarray(cfg.index_margin), np.asarray(cfg.stock_margin))


def short_margin(
    premium: Tensor, spot: Tensor, strike: Tensor, is_call: Tensor, rate_a: Tensor, rate_b: Tensor
) -> Tensor:
    """Requirement per share of one short option (any shapes that broadcast)."""
    call = as_float(is_call, premium.dtype)
    # put: S > K
    out_of_money = torch.lerp((spot - strike).clamp_min(0), (strike - spot).clamp_min(0), call)
    floor_base = torch.lerp(strike, spot, call)
    return torch.maximum(premium + rate_a * spot - out_of_money, premium + rate_b * floor_base)
