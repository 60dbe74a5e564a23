"""A seeded synthetic market: GBM with Markov regime switching and Poisson jumps.

Every underlying shares one regime path (a market-wide state) and a common
factor; each bar also carries the regime label so tests can check that regimes
change realised volatility. With ``signal_strength > 0`` a persistent hidden
trend drives the next bars' drift and is revealed, at bar t, in bar t's volume:
a signal an agent can learn without any look-ahead. Each bar's ``iv`` column is the implied vol the
market quotes: the current regime's true vol times ``iv_premium``.

The bars fall on the clock of ``interval`` and ``hours`` (business days by default; 15-minute 24/7
bars make a crypto-like market), and a bar's share of a year is one over the bars a year the data's
own clock reads from those timestamps (``clstm_ppo.data.calendar``), so annual drifts, vols and jump
rates mean what they say at any interval. Per-bar settings (the regime switch chance, the signal's
persistence) stay per bar.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from clstm_ppo.config import ConfigError, SyntheticConfig
from clstm_ppo.data.calendar import detect_clock

SIGNAL_PERSISTENCE = 0.95  # AR(1) coefficient of the planted trend: lasts ~20 bars
# exchange hours of intraday bars
SESSION = (pd.Timedelta(hours=9, minutes=30), pd.Timedelta(hours=16))
# shut Friday 22:00 to Sunday 22:00
FX_WEEK = (pd.Timedelta(days=4, hours=22), pd.Timedelta(days=6, hours=22))


def _check(cfg: SyntheticConfig) -> None:
    if len(cfg.regime_drift) != len(cfg.regime_vol) or not cfg.regime_vol:
        raise ConfigError(
            "config: data.synthetic.regime_drift and regime_vol need one entry per "
            "regime, equally many"
        )
    if min(cfg.regime_vol) <= 0:
        raise ConfigError("config: data.synthetic.regime_vol entries must be positive")
    if cfg.iv_premium <= 0:
        raise ConfigError(
            "config: data.synthetic.iv_premium must be positive (1.25: implied "
            "vol 25% over true vol)"
        )
    if cfg.n_bars < 2 or cfg.n_underlyings < 1:
        raise ConfigError("config: data.synthetic.n_bars must be >= 2 and n_underlyings >= 1")
    if not 0.0 <= cfg.regime_switch_prob <= 1.0 or not -1.0 <= cfg.correlation <= 1.0:
        raise ConfigError(
            "config: data.synthetic.regime_switch_prob must lie in [0, 1] and "
            "correlation in [-1, 1]"
        )


def _regime_path(
    rng: np.random.Generator, n_bars: int, n_regimes: int, switch_prob: float
) -> np.ndarray:
    regimes = np.zeros(n_bars, dtype=np.int64)
    if n_regimes == 1:
        return regimes
    switches = rng.random(n_bars) < switch_prob
    # On a switch, jump to one of the other regimes uniformly.
    offsets = rng.integers(1, n_regimes, size=n_bars)
    for t in range(1, n_bars):  # a Markov chain is sequential by nature; n_bars is small
        regimes[t] = (regimes[t - 1] + offsets[t]) % n_regimes if switches[t] else regimes[t - 1]
    return regimes


def _interval(cfg: SyntheticConfig) -> pd.Timedelta:
    try:
        offset = pd.tseries.frequencies.to_offset(cfg.interval)
        # pandas 3.0 made a day a calendar offset that Timedelta refuses (3.1
        # takes it again): count its days.
        step = pd.Timedelta(days=offset.n) if offset.rule_code == "D" else pd.Timedelta(offset)
    except ValueError:
        step = None
    if (
        step is None
        or step <= pd.Timedelta(0)
        or step > pd.Timedelta(days=1)
        or (cfg.hours == "exchange" and pd.Timedelta(days=1) > step > SESSION[1] - SESSION[0])
    ):
        raise ConfigError(
            f"config: data.synthetic.interval {cfg.interval!r} is not a bar interval up to a day "
            "(shorter than a session for exchange hours); write one such as 1D, 1h, 15min, 5min"
        )
    return step


def synthetic_dates(cfg: SyntheticConfig) -> pd.DatetimeIndex:
    """``cfg.n_bars`` timestamps (each a bar's close) from ``cfg.start_date`` on the clock of
    ``cfg.interval`` and ``cfg.hours``: business days, or calendar days for 24/7; intraday, the
    bars of 09:30-16:00 sessions on business days, of an FX week (Sunday 22:00 to Friday 22:00)
    or of every hour."""
    n, step, start = cfg.n_bars, _interval(cfg), pd.Timestamp(cfg.start_date)
    if step == pd.Timedelta(days=1):
        return (
            pd.date_range(start, periods=n, freq="D")
            if cfg.hours == "24/7"
            else pd.bdate_range(start, periods=n)
        )
    if cfg.hours == "exchange":
        per_session = (SESSION[1] - SESSION[0]) // step
        days = pd.bdate_range(start, periods=math.ceil(n / per_session))
        closes = SESSION[0].to_timedelta64() + step.to_timedelta64() * np.arange(1, per_session + 1)
        return pd.DatetimeIndex((days.values[:, None] + closes).ravel()[:n])
    stamps = pd.date_range(start, periods=2 * n + 2 * (pd.Timedelta(weeks=1) // step), freq=step)
    if cfg.hours == "24/5":
        in_week = stamps - stamps.normalize() + pd.to_timedelta(stamps.day_of_week, unit="D")
        stamps = stamps[(in_week <= FX_WEEK[0]) | (in_week > FX_WEEK[1])]
    return stamps[:n]


def generate_synthetic(cfg: SyntheticConfig) -> dict[str, pd.DataFrame]:
    """Bars per synthetic underlying (SYN0, SYN1, ...), reproducible by ``cfg.seed``."""
    _check(cfg)
    dates = synthetic_dates(cfg)
    rng = np.random.default_rng(cfg.seed)
    n, k = cfg.n_bars, cfg.n_underlyings
    # a bar's share of a year, as the data's clock reads it
    dt = 1.0 / detect_clock(dates).periods_per_year
    regimes = _regime_path(rng, n, len(cfg.regime_vol), cfg.regime_switch_prob)
    drift = np.asarray(cfg.regime_drift)[regimes][:, None]
    vol = np.asarray(cfg.regime_vol)[regimes][:, None]

    common = rng.standard_normal((n, 1))
    own = rng.standard_normal((n, k))
    rho = cfg.correlation if k > 1 else 0.0
    shocks = rho * common + np.sqrt(1.0 - rho**2) * own
    jumps = rng.poisson(cfg.jumps_per_year * dt, size=(n, k)) * rng.normal(
        cfg.jump_mean, cfg.jump_std, size=(n, k)
    )

    trend = np.zeros((n, k))
    innovations = rng.standard_normal((n, k)) * np.sqrt(1.0 - SIGNAL_PERSISTENCE**2)
    for t in range(1, n):
        trend[t] = SIGNAL_PERSISTENCE * trend[t - 1] + innovations[t]
    # The drift of bar t's return depends on the trend known at bar t-1 (revealed in its volume).
    planted = np.zeros((n, k))
    planted[1:] = cfg.signal_strength * trend[:-1] * vol[1:] * np.sqrt(dt)

    log_ret = (drift - 0.5 * vol**2) * dt + vol * np.sqrt(dt) * shocks + jumps + planted
    log_ret[0] = 0.0
    close = cfg.initial_price * np.exp(np.cumsum(log_ret, axis=0))
    gap = vol * np.sqrt(dt) * 0.1 * rng.standard_normal((n, k))  # small overnight gap
    open_ = np.empty_like(close)
    open_[0] = cfg.initial_price
    open_[1:] = close[:-1] * np.exp(gap[1:])
    spread = np.abs(rng.standard_normal((n, k))) * vol * np.sqrt(dt) * 0.5
    high = np.maximum(open_, close) * np.exp(spread)
    low = np.minimum(open_, close) * np.exp(
        -np.abs(rng.standard_normal((n, k))) * vol * np.sqrt(dt) * 0.5
    )
    noise = 0.3 * rng.standard_normal((n, k))
    planted = 0.5 * trend if cfg.signal_strength else 0.0
    volume = cfg.base_volume * (vol / min(cfg.regime_vol)) * np.exp(noise + planted)

    # The market prices options at the regime's true vol (diffusion and jumps) times a
    # variance risk premium: as in real markets, buying options loses on average. It does not
    # see the planted trend: that is the alpha an agent can find (and it makes long options
    # pay where the trend is strong).
    true_vol = np.sqrt(vol[:, 0] ** 2 + cfg.jumps_per_year * (cfg.jump_mean**2 + cfg.jump_std**2))
    iv = cfg.iv_premium * true_vol

    frames = {}
    for i in range(k):
        frames[f"SYN{i}"] = pd.DataFrame(
            {
                "date": dates,
                "open": open_[:, i],
                "high": high[:, i],
                "low": low[:, i],
                "close": close[:, i],
                "volume": volume[:, i],
                "iv": iv,
                "regime": regimes,
            }
        )
    return frames
