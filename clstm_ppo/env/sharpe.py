"""The differential Sharpe ratio reward (``env.reward: dsr``): Moody & Saffell's (2001)
D_t, the bar's first-order effect on an exponential moving Sharpe ratio of the copy's
returns over the T-bill.

Each copy keeps the moving mean A and second moment B of its bar returns
(``EnvState.sharpe_moments``), from a prior at each episode start; docs/ENVIRONMENT.md
("Differential Sharpe ratio") has the definition, the start and the scale. Tensor code only, batched
over the copies: it runs inside the compiled step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from clstm_ppo.config import EnvConfig
from clstm_ppo.env.state import EnvSpec, EnvState

# The volatility D_t divides by is at least this share of env.dsr_prior_vol: a copy
# whose returns barely move (all cash: R_t = 0 every bar, so B decays towards 0) gets
# a finite, bounded D_t, not 0/0.
VOL_FLOOR = 0.1
# A bar's return over the T-bill counts at most +-100%: beyond that the start-of-bar equity is all
# but gone and the ratio means nothing; with it, and the floor above, |D_t| is bounded.
MAX_RETURN = 1.0


def prior_variance(cfg: EnvConfig) -> float:
    """B at an episode's start (A starts at 0): dsr_prior_vol^2."""
    return cfg.dsr_prior_vol**2


def min_variance(cfg: EnvConfig) -> float:
    """The least variance D_t's denominator uses (``VOL_FLOOR``)."""
    return (VOL_FLOOR * cfg.dsr_prior_vol) ** 2


def differential_sharpe(
    moments: Tensor, r: Tensor, rate: float, floor: float
) -> tuple[Tensor, Tensor]:
    """(D_t, moments after the bar) for returns ``r`` (N,) and ``moments`` (2, N) = (A, B) before
    it: D_t = (B dA - A dB / 2) / max(B - A^2, floor)^(3/2), with dA = r - A, dB = r^2 - B; A +=
    rate dA, B += rate dB."""
    a, b = moments[0], moments[1]
    da, db = r - a, r * r - b
    # >= 0 in exact arithmetic; the floor also covers rounding
    variance = (b - a * a).clamp_min(floor)
    d = (b * da - 0.5 * a * db) / variance.pow(1.5)
    return d, torch.stack([a + rate * da, b + rate * db])


def return_over_tbill(
    spec: EnvSpec, equity: Tensor, prev_equity: Tensor, cash_return: Tensor
) -> Tensor:
    """(N,) R_t: the equity's return over the bar less the T-bill's (``cash_return``), clipped to
    +-MAX_RETURN. The start-of-bar equity is floored at a millionth of the initial cash, so a ruined
    account divides by no 0."""
    base = prev_equity.clamp_min(spec.cfg.initial_cash * 1e-6)
    return ((equity - prev_equity) / base - cash_return).clamp(-MAX_RETURN, MAX_RETURN)


def dsr_reward(spec: EnvSpec, s: EnvState, prev_equity: Tensor, cash_return: Tensor) -> Tensor:
    """(N,) the bar's reward dsr_rate x D_t x reward_scale; rebinds ``s.sharpe_moments`` to the
    moments after it. dsr_rate x D_t is the bar's first-order change (in the rate) of the moving
    Sharpe ratio A / sqrt(B - A^2)."""
    cfg = spec.cfg
    r = return_over_tbill(spec, s.equity, prev_equity, cash_return)
    d, s.sharpe_moments = differential_sharpe(s.sharpe_moments, r, cfg.dsr_rate, min_variance(cfg))
    return d * (cfg.dsr_rate * cfg.reward_scale)
