"""European Black-Scholes prices and Greeks, batched in torch on any device and dtype.

American early exercise is out of scope: every option here is European, which
for calls on a low-dividend index is a close approximation and for deep
in-the-money puts slightly underprices them.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

_SQRT_2PI = math.sqrt(2.0 * math.pi)
MIN_T = 1e-8  # below this (years) an option is worth its intrinsic value


class Greeks(NamedTuple):
    price: Tensor
    delta: Tensor  # d price / d S
    gamma: Tensor  # d2 price / d S2
    vega: Tensor  # d price / d sigma (per 1.00 of vol)
    theta: Tensor  # d price / d t (per year, calendar time passing)


def _d1_d2(spot: Tensor, strike: Tensor, t: Tensor, r: float, q: float, sigma: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    sqrt_t = torch.sqrt(t.clamp_min(MIN_T))
    vol_t = sigma * sqrt_t
    d1 = (torch.log(spot / strike) + (r - q + 0.5 * sigma * sigma) * t) / vol_t
    return d1, d1 - vol_t, sqrt_t


def bs_call_put(spot: Tensor, strike: Tensor, t: Tensor, r: float, q: float, sigma: Tensor) -> tuple[Tensor, Tensor]:
    """Call and put prices per share from one evaluation; ``t`` in years; at t <= 0 the intrinsic values."""
    d1, d2, _ = _d1_d2(spot, strike, t, r, q, sigma)
    disc_s = spot * torch.exp(-q * t)
    disc_k = strike * torch.exp(-r * t)
    call = disc_s * torch.special.ndtr(d1) - disc_k * torch.special.ndtr(d2)
    put = call - disc_s + disc_k  # put-call parity
    live = t > MIN_T
    # The clamps remove -1e-16 rounding on far out-of-the-money options.
    return (torch.where(live, call.clamp_min(0), (spot - strike).clamp_min(0)),
            torch.where(live, put.clamp_min(0), (strike - spot).clamp_min(0)))


def bs_price(spot: Tensor, strike: Tensor, t: Tensor, r: float, q: float, sigma: Tensor, is_call: Tensor) -> Tensor:
    """Price per share of a call (``is_call``) or put; ``t`` in years; at t <= 0 the intrinsic value."""
    call, put = bs_call_put(spot, strike, t, r, q, sigma)
    return torch.where(is_call, call, put)


def bs_greeks(spot: Tensor, strike: Tensor, t: Tensor, r: float, q: float, sigma: Tensor, is_call: Tensor) -> Greeks:
    """Price and Greeks in one pass (d1, d2 and the normal terms computed once)."""
    d1, d2, sqrt_t = _d1_d2(spot, strike, t, r, q, sigma)
    exp_q, exp_r = torch.exp(-q * t), torch.exp(-r * t)
    n_d1, n_d2 = torch.special.ndtr(d1), torch.special.ndtr(d2)
    pdf_d1 = torch.exp(-0.5 * d1 * d1) / _SQRT_2PI
    call = spot * exp_q * n_d1 - strike * exp_r * n_d2
    put = call - spot * exp_q + strike * exp_r  # put-call parity
    delta = torch.where(is_call, exp_q * n_d1, exp_q * (n_d1 - 1.0))
    gamma = exp_q * pdf_d1 / (spot * sigma * sqrt_t)
    vega = spot * exp_q * pdf_d1 * sqrt_t
    common = -spot * exp_q * pdf_d1 * sigma / (2.0 * sqrt_t)
    theta_call = common + q * spot * exp_q * n_d1 - r * strike * exp_r * n_d2
    theta_put = common - q * spot * exp_q * (1.0 - n_d1) + r * strike * exp_r * (1.0 - n_d2)
    live = t > MIN_T
    intrinsic = torch.where(is_call, (spot - strike).clamp_min(0), (strike - spot).clamp_min(0))
    itm = torch.where(is_call, spot > strike, spot < strike).to(spot.dtype)
    zero = torch.zeros_like(spot)
    return Greeks(
        price=torch.where(live, torch.where(is_call, call, put).clamp_min(0), intrinsic),
        delta=torch.where(live, delta, torch.where(is_call, itm, -itm)),
        gamma=torch.where(live, gamma, zero),
        vega=torch.where(live, vega, zero),
        theta=torch.where(live, torch.where(is_call, theta_call, theta_put), zero),
    )
