"""Implied volatility per bar and per strike: from an iv/vix column when the data has one, else realised x premium."""
from __future__ import annotations

import numpy as np
from torch import Tensor

import torch

from clstm_ppo.config import MarketConfig


def atm_iv_per_bar(bars: dict[str, np.ndarray], cfg: MarketConfig) -> np.ndarray:
    """At-the-money implied vol (S, T), known at each bar's close."""
    if "iv" in bars:
        iv = bars["iv"]
        # VIX-style columns are in percent points (13.8), an iv column may be a decimal (0.138).
        iv = iv / 100.0 if np.nanmedian(iv) > 3.0 else iv
    else:
        iv = bars["realized_vol"] * cfg.iv_premium
    return np.clip(iv, cfg.min_iv, cfg.max_iv)


def skewed_iv(atm_iv: Tensor, strike: Tensor, spot: Tensor, cfg: MarketConfig) -> Tensor:
    """A simple equity skew: lower strikes trade at higher implied vol."""
    return skewed_iv_at(atm_iv, torch.log(strike / spot), cfg)


def skewed_iv_at(atm_iv: Tensor, log_k_over_s: Tensor, cfg: MarketConfig) -> Tensor:
    """``skewed_iv`` from ln(strike / spot), for callers that already have it."""
    return (atm_iv * (1.0 - cfg.iv_skew * log_k_over_s)).clamp(cfg.min_iv, cfg.max_iv)
