"""The planted-edge market: a seeded synthetic index whose options carry a variance risk premium
that moves with a hidden state, so that the best option-selling policy is known (docs/PLANTED.md).

- Returns: a GJR-GARCH(1,1) diffusion (by default no jumps and no dividends), drifting at the T-bill
  rate plus ``equity_premium``; optional Poisson jumps whose sizes scale with the vol level.
- The market's own forecast: the GARCH forecast, at bar t's close, of the variance over the
  next 21 bars (an option's 30 calendar days), jumps included: what the index's returns
  will realise on average.
- Implied vol: the ``iv`` column is that forecast times ``1 + max(premium_t, premium_floor)``,
  ``premium_t`` an AR(1) independent of the returns. Selling while it is rich pays on average; below
  0 selling loses. The floor keeps the cheap side shallow: an out-of-the-money option's price moves
  several times its vol, so a deep cheap side would make a bought option a lottery ticket that
  outscores every sale. Nothing else in the bars moves with the premium (volume follows the vol
  level), so an agent sees it only through the implied-vol features.
- Priced by the ``planted`` config's flat surface (``config/named/planted.yaml``), every strike is
  fair at premium_t = 0: the only edge is the planted one.

The true state travels beside the bars as the columns ``premium`` and ``forecast_vol``, which the
dataset does not load: the oracle (``backtest/oracle.py``) reads them by date, no agent ever does.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.tseries.holiday import USFederalHolidayCalendar
from pandas.tseries.offsets import CustomBusinessDay

from clstm_ppo.config import Config, ConfigError, PlantedConfig, load_config

BARS_PER_YEAR = 252
# the exchange days of a 30-calendar-day option: the horizon the forecast (and the iv) quotes
OPTION_BARS = 21
SYMBOL = "PLT"
# the indicators' (turbulence's) look-back, dropped by the dataset before the training split
WARM_UP_YEARS = 1.0


def _check(cfg: PlantedConfig) -> None:
    if garch_persistence(cfg) >= 1.0:
        raise ConfigError(
            f"config: data.planted.garch_alpha + garch_leverage / 2 + garch_beta is "
            f"{garch_persistence(cfg):g}; keep it below 1 (a stationary variance)"
        )
    if _jump_variance(cfg) >= cfg.vol**2:
        raise ConfigError(
            f"config: data.planted jumps alone give a variance of {_jump_variance(cfg):.4f} a "
            f"year, not below vol^2 = {cfg.vol**2:.4f}; lower jumps_per_year or the "
            "jump sizes, or raise vol"
        )
    if WARM_UP_YEARS + cfg.train_years + cfg.val_years >= cfg.years:
        raise ConfigError(
            f"config: data.planted.years ({cfg.years:g}) leaves no test years after the warm-up "
            f"year, train_years ({cfg.train_years:g}) and val_years "
            f"({cfg.val_years:g}); raise years"
        )


def garch_persistence(cfg: PlantedConfig) -> float:
    """How much of today's variance gap survives a bar on average: alpha + leverage / 2 + beta (a
    shock is negative half the time)."""
    return cfg.garch_alpha + 0.5 * cfg.garch_leverage + cfg.garch_beta


def _jump_variance(cfg: PlantedConfig) -> float:
    """Annual variance of the jumps at the long-run vol level."""
    return cfg.jumps_per_year * (cfg.jump_mean**2 + cfg.jump_std**2)


def planted_dates(cfg: PlantedConfig) -> pd.DatetimeIndex:
    """``years`` x 252 exchange days (weekdays less US federal holidays) from ``start_date``."""
    days = CustomBusinessDay(calendar=USFederalHolidayCalendar())
    return pd.date_range(
        pd.Timestamp(cfg.start_date), periods=int(round(cfg.years * BARS_PER_YEAR)), freq=days
    )


def planted_split_ends(cfg: PlantedConfig) -> tuple[str, str]:
    """The last dates of the training and validation splits: ``train_years`` and ``val_years``
    after the warm-up."""
    dates = planted_dates(cfg)
    train = int(round((WARM_UP_YEARS + cfg.train_years) * BARS_PER_YEAR)) - 1
    val = int(round((WARM_UP_YEARS + cfg.train_years + cfg.val_years) * BARS_PER_YEAR)) - 1
    return str(dates[train].date()), str(dates[val].date())


def premium_path(cfg: PlantedConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    """(n,) premium_t: a stationary AR(1) around ``premium_mean`` with std ``premium_swing``."""
    phi = cfg.premium_persistence
    shocks = rng.standard_normal(n)
    out = np.empty(n)
    out[0] = cfg.premium_mean + cfg.premium_swing * shocks[0]
    scale = cfg.premium_swing * np.sqrt(1.0 - phi**2)
    for t in range(1, n):  # an AR(1) is sequential by nature
        out[t] = cfg.premium_mean + phi * (out[t - 1] - cfg.premium_mean) + scale * shocks[t]
    return out


def _garch_variance(cfg: PlantedConfig, shocks: np.ndarray, long_run: float) -> np.ndarray:
    """(n + 1,) per-bar diffusive variance h_t of bars 0..n (h_n is the next bar's, known at bar
    n-1's close): a GJR-GARCH(1,1), in which a fall raises the variance more than a rise (the
    leverage effect), so that the index's month is skewed to the left as the surface's wings say:
    its calls are not lottery tickets."""
    omega = long_run * (1.0 - garch_persistence(cfg))
    h = np.empty(len(shocks) + 1)
    h[0] = long_run
    for t, z in enumerate(shocks):  # a GARCH recursion is sequential by nature
        weight = cfg.garch_alpha + (cfg.garch_leverage if z < 0.0 else 0.0)
        h[t + 1] = omega + weight * h[t] * z * z + cfg.garch_beta * h[t]
    return h


def forecast_variance(
    h_next: np.ndarray, long_run: float, persistence: float, horizon: int
) -> np.ndarray:
    """The GARCH forecast of the mean per-bar variance over the next ``horizon`` bars, from the
    next bar's variance: E[h_{t+k}] = long_run + persistence^(k-1) (h_{t+1} - long_run), averaged
    over k = 1..horizon."""
    share = (
        (1.0 - persistence**horizon) / ((1.0 - persistence) * horizon)
        if persistence > 0
        else 1.0 / horizon
    )
    return long_run + (h_next - long_run) * share


def iv_factor(premium: np.ndarray, floor: float) -> np.ndarray:
    """The implied vol's markup on the market's forecast: ``1 + premium_t``, never
    below ``1 + floor``."""
    return 1.0 + np.maximum(premium, floor)


def generate_planted(cfg: PlantedConfig) -> dict[str, pd.DataFrame]:
    """The planted market's bars, one underlying (PLT), reproducible by ``cfg.seed``: date,
    OHLCV, iv, rate, and beside them the hidden state ``premium`` and ``forecast_vol`` (never
    loaded into an observation)."""
    _check(cfg)
    dates = planted_dates(cfg)
    n = len(dates)
    rng = np.random.default_rng(cfg.seed)
    dt = 1.0 / BARS_PER_YEAR
    jump_var = _jump_variance(cfg)
    diffusive_long_run = (cfg.vol**2 - jump_var) * dt  # per bar
    # jumps scale with the level: a fixed ratio
    total_per_diffusive = cfg.vol**2 / (cfg.vol**2 - jump_var)

    z = rng.standard_normal(n)
    # h[t]: bar t's variance; h[t + 1] is known at bar t's close
    h = _garch_variance(cfg, z, diffusive_long_run)
    # the vol level against its long run: jump sizes scale with it
    level = np.sqrt(h[:n] / diffusive_long_run)
    counts = rng.poisson(cfg.jumps_per_year * dt, n)
    jumps = level * (
        counts * cfg.jump_mean + np.sqrt(counts) * cfg.jump_std * rng.standard_normal(n)
    )
    compensator = (
        cfg.jumps_per_year
        * dt
        * np.expm1(level * cfg.jump_mean + 0.5 * (level * cfg.jump_std) ** 2)
    )
    log_ret = (
        (cfg.rate + cfg.equity_premium) * dt
        - 0.5 * h[:n]
        - compensator
        + np.sqrt(h[:n]) * z
        + jumps
    )
    log_ret[0] = 0.0
    close = cfg.initial_price * np.exp(np.cumsum(log_ret))

    persistence = garch_persistence(cfg)
    forecast = forecast_variance(h[1:], diffusive_long_run, persistence, OPTION_BARS)
    forecast_vol = np.sqrt(forecast * total_per_diffusive * BARS_PER_YEAR)
    premium = premium_path(cfg, rng, n)
    iv = forecast_vol * iv_factor(premium, cfg.premium_floor)

    bar_vol = np.sqrt(h[:n])
    open_ = np.empty(n)
    open_[0] = cfg.initial_price
    # a small overnight gap
    open_[1:] = close[:-1] * np.exp(0.1 * bar_vol[1:] * rng.standard_normal(n - 1))
    high = np.maximum(open_, close) * np.exp(0.5 * bar_vol * np.abs(rng.standard_normal(n)))
    low = np.minimum(open_, close) * np.exp(-0.5 * bar_vol * np.abs(rng.standard_normal(n)))
    volume = cfg.base_volume * level * np.exp(0.3 * rng.standard_normal(n))
    frame = pd.DataFrame(
        {
            "date": dates,
            "open": open_,
            "high": high,
            "low": low,
            "close": close,
            "volume": volume,
            "iv": iv,
            "rate": np.full(n, cfg.rate),
            "premium": premium,
            "forecast_vol": forecast_vol,
        }
    )
    return {SYMBOL: frame}


def planted_state(cfg: PlantedConfig, dates: pd.DatetimeIndex) -> pd.DataFrame:
    """The hidden ``premium`` and ``forecast_vol`` at ``dates`` (a dataset's
    bars of this market)."""
    frame = generate_planted(cfg)[SYMBOL].set_index("date")
    missing = dates.difference(frame.index)
    if len(missing):
        raise ValueError(
            f"{missing[0].date()} is not a bar of the planted market of these settings; give the "
            "dates of a dataset built from the same data.planted settings"
        )
    return frame.loc[dates, ["premium", "forecast_vol"]]


# The market settings the planted config prices the chain with: a flat surface
# at the iv column, no dividend.
FAIR_SURFACE = ("atm_per_iv", "iv_skew", "iv_call_skew", "iv_smile", "dividend_yield")


def planted_surface_notice(cfg: Config) -> str | None:
    """One line when ``cfg`` walks the planted market on another surface than the planted config's,
    whose chain is then not fair with nothing planted (docs/PLANTED.md); None otherwise."""
    if cfg.data.source != "planted":
        return None
    fair = load_config("planted", []).market
    differ = [k for k in FAIR_SURFACE if getattr(cfg.market, k) != getattr(fair, k)]
    if not differ:
        return None
    return (
        f"warning: the planted market is priced here with market.{', market.'.join(differ)} unlike "
        "its own config's flat surface, so some strikes pay a buyer or a seller before any premium "
        "is planted; train and walk it with --config planted"
    )
