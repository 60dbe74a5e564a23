"""European Black-Scholes prices and Greeks, batched in torch on any device and dtype.

American early exercise is out of scope: every option here is European, which
for calls on a low-dividend index is a close approximation and for deep
in-the-money puts slightly underprices them.

Puts come from the call terms by put-call parity (price, delta and theta each
shift by a put flag times a closed form), so one evaluation serves a mixed
batch of calls and puts without computing both.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from clstm_ppo.market.flags import as_float, call_sign, choose

_SQRT_2PI = math.sqrt(2.0 * math.pi)
MIN_T = 1e-8  # below this (years) an option is worth its intrinsic value


class Greeks(NamedTuple):
    price: Tensor
    delta: Tensor  # d price / d S
    gamma: Tensor  # d2 price / d S2
    vega: Tensor  # d price / d sigma (per 1.00 of vol)
    theta: Tensor  # d price / d t (per year, calendar time passing)


class _Terms(NamedTuple):
    d1: Tensor
    d2: Tensor
    sqrt_t: Tensor
    vol_t: Tensor  # sigma sqrt(t)
    disc_s: Tensor  # S exp(-q t)
    disc_k: Tensor  # K exp(-r t)


def _terms(
    spot: Tensor,
    strike: Tensor,
    t: Tensor,
    r: float,
    q: float,
    sigma: Tensor,
    log_s_over_k: Tensor | None,
) -> _Terms:
    sqrt_t = torch.sqrt(t.clamp_min(MIN_T))
    vol_t = sigma * sqrt_t
    log_sk = torch.log(spot / strike) if log_s_over_k is None else log_s_over_k
    # the textbook d1 with sigma^2 t / 2 over sigma sqrt(t) split off
    d1 = (log_sk + (r - q) * t) / vol_t + 0.5 * vol_t
    return _Terms(
        d1, d1 - vol_t, sqrt_t, vol_t, spot * torch.exp(-q * t), strike * torch.exp(-r * t)
    )


def _intrinsic(spot: Tensor, strike: Tensor, is_call: Tensor) -> Tensor:
    return ((spot - strike) * call_sign(is_call, spot.dtype)).clamp_min(0)


def bs_call_put(
    spot: Tensor, strike: Tensor, t: Tensor, r: float, q: float, sigma: Tensor
) -> tuple[Tensor, Tensor]:
    """Call and put prices per share from one evaluation; ``t`` in years; at t <= 0 the
    intrinsic values."""
    x = _terms(spot, strike, t, r, q, sigma, None)
    call = x.disc_s * torch.special.ndtr(x.d1) - x.disc_k * torch.special.ndtr(x.d2)
    put = call - x.disc_s + x.disc_k  # put-call parity
    live = t > MIN_T
    # The clamps remove -1e-16 rounding on far out-of-the-money options.
    return (
        torch.where(live, call.clamp_min(0), (spot - strike).clamp_min(0)),
        torch.where(live, put.clamp_min(0), (strike - spot).clamp_min(0)),
    )


def bs_price(
    spot: Tensor,
    strike: Tensor,
    t: Tensor,
    r: float,
    q: float,
    sigma: Tensor,
    is_call: Tensor,
    log_s_over_k: Tensor | None = None,
) -> Tensor:
    """Price per share of a call (``is_call``) or put; ``t`` in years; at t <= 0
    the intrinsic value.

    ``log_s_over_k``: ln(spot / strike) when the caller already has it.
    """
    x = _terms(spot, strike, t, r, q, sigma, log_s_over_k)
    call = x.disc_s * torch.special.ndtr(x.d1) - x.disc_k * torch.special.ndtr(x.d2)
    put = 1.0 - as_float(is_call, call.dtype)
    price = (call - put * (x.disc_s - x.disc_k)).clamp_min(0)  # put-call parity
    return choose(t > MIN_T, price, _intrinsic(spot, strike, is_call))


def bs_greeks_before_expiry(
    spot: Tensor,
    strike: Tensor,
    t: Tensor,
    r: float,
    q: float,
    sigma: Tensor,
    is_call: Tensor,
    log_s_over_k: Tensor | None = None,
) -> Greeks:
    """Price and Greeks in one pass for options with ``t`` > 0 (the caller guarantees it).

    Entries with t <= 0 come out finite but are not the expiry values: use ``bs_greeks`` for those.
    """
    x = _terms(spot, strike, t, r, q, sigma, log_s_over_k)
    put = 1.0 - as_float(is_call, spot.dtype)  # parity shifts: 0 for calls, 1 for puts
    # put: N(d) - 1 = -N(-d)
    n_d1, n_d2 = torch.special.ndtr(x.d1) - put, torch.special.ndtr(x.d2) - put
    s_pdf = x.disc_s * torch.exp(x.d1.square() * -0.5) * (1.0 / _SQRT_2PI)  # S e^{-qt} n(d1)
    # Every Greek reuses these two legs; fewer ops matter more than flops at these sizes on CPU.
    s_leg, k_leg = x.disc_s * n_d1, x.disc_k * n_d2
    return Greeks(
        price=(s_leg - k_leg).clamp_min(0),  # the clamp removes -1e-16 rounding
        delta=s_leg / spot,
        gamma=s_pdf / (spot * spot * x.vol_t),
        vega=s_pdf * x.sqrt_t,
        theta=q * s_leg - r * k_leg - s_pdf * sigma / (2.0 * x.sqrt_t),
    )


def bs_greeks(
    spot: Tensor, strike: Tensor, t: Tensor, r: float, q: float, sigma: Tensor, is_call: Tensor
) -> Greeks:
    """Price and Greeks in one pass; at t <= 0 the intrinsic value, its step delta and zero
    gamma, vega, theta."""
    g = bs_greeks_before_expiry(spot, strike, t, r, q, sigma, is_call)
    live = t > MIN_T
    sign = call_sign(is_call, spot.dtype)
    itm = ((spot - strike) * sign > 0).to(spot.dtype)
    zero = torch.zeros_like(spot)
    return Greeks(
        price=torch.where(live, g.price, _intrinsic(spot, strike, is_call)),
        delta=torch.where(live, g.delta, itm * sign),
        gamma=torch.where(live, g.gamma, zero),
        vega=torch.where(live, g.vega, zero),
        theta=torch.where(live, g.theta, zero),
    )
