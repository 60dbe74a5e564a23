"""The implied-vol surface around a bar's 30-day at-the-money vol: term structure, skew and smile.

docs/MARKET.md section 1 gives the formulas; ``clstm_ppo.market.inputs`` gives the
at-the-money series.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from clstm_ppo.config import MarketConfig

DAYS_PER_YEAR = 365.0  # option time runs in calendar days
ATM_YEARS = 30.0 / DAYS_PER_YEAR  # the maturity the at-the-money series quotes (VIX: 30 days)
MIN_SKEW_YEARS = 1.0 / DAYS_PER_YEAR  # the skew stops steepening inside one day to expiry


def _reversion_share(kappa_t: Tensor | float) -> Tensor | float:
    """f(u) = (1 - e^-u) / u: the share of today's variance gap still expected on average
    over u = kappa T."""
    if isinstance(kappa_t, float):
        return -math.expm1(-kappa_t) / kappa_t if kappa_t > 0 else 1.0
    u = kappa_t.clamp_min(1e-8)
    return -torch.expm1(-u) / u


def atm_term(atm30: Tensor, long_run: Tensor, years: Tensor, cfg: MarketConfig) -> Tensor:
    """At-the-money vol at maturity ``years``: variance reverts from the 30-day
    level to ``long_run``."""
    if cfg.term_reversion <= 0:
        return atm30
    kappa = cfg.term_reversion
    weight = _reversion_share(kappa * years) / _reversion_share(kappa * ATM_YEARS)
    long_var = long_run * long_run
    return (long_var + (atm30 * atm30 - long_var) * weight).clamp_min(cfg.min_iv**2).sqrt()


def surface_iv(
    atm30: Tensor, long_run: Tensor, log_k_over_s: Tensor, years: Tensor, cfg: MarketConfig
) -> Tensor:
    """Implied vol of strike K at maturity ``years``: the term's ATM vol, minus the skew, plus the
    smile, in the moneyness z = ln(K/S) / sqrt(T / 30 days), so the skew steepens as 1/sqrt(T); flat
    beyond +-iv_wing_z."""
    z = (log_k_over_s * (ATM_YEARS / years.clamp_min(MIN_SKEW_YEARS)).sqrt()).clamp(
        -cfg.iv_wing_z, cfg.iv_wing_z
    )
    atm = atm_term(atm30, long_run, years, cfg)
    # Strikes above the money fall by iv_call_skew instead (0 or 1 times the difference: with equal
    # skews the sum is iv_skew exactly, so the surface is the one-skew surface bit for bit).
    skew = cfg.iv_skew + (cfg.iv_call_skew - cfg.iv_skew) * (z > 0).to(z.dtype)
    return (atm + z * (cfg.iv_smile * z - skew)).clamp(cfg.min_iv, cfg.max_iv)
