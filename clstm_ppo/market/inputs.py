"""The per-bar series the option market reads: implied vol at each open and close, rates,
dividends, stale opens.

Implied vol comes, in order of preference (docs/MARKET.md), from a real series joined by date (the
embedded S&P 500 carries the CBOE VIX; a user file may carry an ``iv``/``vix`` column), else from a
model: an EWMA volatility estimate mapped to implied vol by
``log IV = a + b log(sigma_ewma) + c leverage``, whose coefficients were fitted on the S&P 500 with
the VIX over the training split only (``fit_iv_model``, ``scripts/studies/fit_iv_model.py``). Every
series here is causal: bar t's values read bars up to t only, and the only statistics taken from a
whole split (the model's floor, the long-run vol) come from the training split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clstm_ppo.config import MarketConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.stale import market_stale_opens


@dataclass
class MarketInputs:
    iv_close: np.ndarray  # (S, T) 30-day ATM implied vol known at bar t's close
    iv_open: np.ndarray  # (S, T) the same at bar t's open
    rate: np.ndarray  # (S, T) risk-free rate of bar t's day, continuously compounded
    dividend_yield: np.ndarray  # (S,)
    # (S,) training-split median of iv_close: where the term structure reverts
    long_run_iv: np.ndarray
    # (S, T) bool: bar t opened at bar t-1's close (fill at t's close instead)
    stale_open: np.ndarray
    iv_source: str  # "column" (a real series) or "model"


def ewma_vol(
    log_returns: np.ndarray, lam: float, first_var: np.ndarray, periods_per_year: float
) -> np.ndarray:
    """Annualised EWMA volatility (RiskMetrics) of (S, T) log returns; bar t's value
    reads returns up to t.

    ``first_var``: (S,) per-bar variance before the first return (a causal start, e.g. the realised
    volatility at that bar). A recursive average has no window edge, so no return "drops out" of it.
    """
    var = np.empty_like(log_returns)
    prev = np.asarray(first_var, dtype=np.float64)
    for t in range(log_returns.shape[1]):
        prev = lam * prev + (1.0 - lam) * log_returns[:, t] ** 2
        var[:, t] = prev
    return np.sqrt(var * periods_per_year)


def leverage(log_returns: np.ndarray, lam: float, periods_per_year: float) -> np.ndarray:
    """EWMA of signed returns (annualised by sqrt(periods)): implied vol falls after rallies,
    rises after falls."""
    out = np.empty_like(log_returns)
    prev = np.zeros(log_returns.shape[0])
    for t in range(log_returns.shape[1]):
        prev = lam * prev + (1.0 - lam) * log_returns[:, t]
        out[:, t] = prev
    return out * np.sqrt(periods_per_year)


def _regressors(data: MarketData, cfg: MarketConfig) -> np.ndarray:
    """(S, T, 3): 1, log EWMA vol, leverage."""
    names = data.feature_names
    returns = data.raw_features[:, :, names.index("log_return")]
    first_var = data.raw_features[:, 0, names.index("realized_vol")] ** 2 / data.periods_per_year
    sigma = ewma_vol(returns, cfg.ewma_lambda, first_var, data.periods_per_year)
    lev = leverage(returns, cfg.leverage_lambda, data.periods_per_year)
    return np.stack([np.ones_like(sigma), np.log(np.maximum(sigma, 1e-6)), lev], axis=-1)


def fit_iv_model(data: MarketData, cfg: MarketConfig) -> list[float]:
    """Least-squares (a, b, c) of log IV on (1, log sigma_ewma, leverage) over the training split of
    ``data``, which must carry a real implied-vol series (``iv`` column)."""
    if "iv" not in data.bars:
        raise ValueError("fitting the implied-vol model needs data with an iv/vix column")
    x = _regressors(data, cfg)
    train = slice(*data.splits["train"])
    y = np.log(_as_decimal(data.bars["iv"]))
    coefs, *_ = np.linalg.lstsq(x[:, train].reshape(-1, 3), y[:, train].reshape(-1), rcond=None)
    return [float(c) for c in coefs]


def _as_decimal(iv: np.ndarray) -> np.ndarray:
    """VIX-style columns are in percent points (13.8), an iv column may be a decimal (0.138)."""
    return iv / 100.0 if np.nanmedian(iv) > 3.0 else iv


def model_iv(data: MarketData, cfg: MarketConfig) -> np.ndarray:
    """(S, T) implied vol from the EWMA model with ``cfg.iv_model_coefs``, floored at the
    lowest value it gives on each underlying's training split (never extrapolated below the
    calmest training bar)."""
    iv = np.exp(_regressors(data, cfg) @ np.asarray(cfg.iv_model_coefs, dtype=np.float64))
    floor = iv[:, slice(*data.splits["train"])].min(axis=1, keepdims=True)
    return np.maximum(iv, floor)


def market_inputs(data: MarketData, cfg: MarketConfig) -> MarketInputs:
    """Every series the market reads, from ``data`` and the market settings."""
    use_column = "iv" in data.bars and cfg.iv_source in ("auto", "column")
    if cfg.iv_source == "column" and "iv" not in data.bars:
        raise ValueError(
            "market.iv_source is 'column' but the data has no iv/vix column; "
            "use market.iv_source=model or add the column"
        )
    if use_column:
        iv_close = _as_decimal(data.bars["iv"])
        opens = data.bars.get("iv_open")
        prev = np.concatenate([iv_close[:, :1], iv_close[:, :-1]], axis=1)
        iv_open = prev if opens is None else _as_decimal(opens)
    else:
        iv_close = model_iv(data, cfg)
        # the model is close to close
        iv_open = np.concatenate([iv_close[:, :1], iv_close[:, :-1]], axis=1)
    # A VIX-style series is a variance-swap rate, above at-the-money vol by
    # about the skew's share: scale it.
    iv_close, iv_open = (
        np.clip(x * cfg.atm_per_iv, cfg.min_iv, cfg.max_iv) for x in (iv_close, iv_open)
    )
    rate = data.bars.get("rate")
    rate = (
        np.full_like(iv_close, cfg.risk_free_rate)
        if rate is None
        else np.asarray(rate, dtype=np.float64)
    )
    adjusted = (
        np.zeros(len(data.symbols), dtype=bool)
        if data.dividend_adjusted is None
        else data.dividend_adjusted
    )
    return MarketInputs(
        iv_close=iv_close,
        iv_open=iv_open,
        rate=rate,
        dividend_yield=np.where(adjusted, 0.0, cfg.dividend_yield),
        long_run_iv=np.median(iv_close[:, slice(*data.splits["train"])], axis=1),
        stale_open=market_stale_opens(data),
        iv_source="column" if use_column else "model",
    )
