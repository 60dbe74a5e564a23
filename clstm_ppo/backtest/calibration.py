"""The market's two fitted settings, refitted from a fold's training years only (docs/BACKTEST.md).

- ``market.iv_model_coefs``: least squares of log VIX on the EWMA vol and leverage of the S&P
  500 (``clstm_ppo.market.inputs.fit_iv_model``), over the bars up to the fold's
  ``data.train_end``. Used by every source without an implied-vol column (single stocks); a
  source with one fits on itself.
- ``market.atm_per_iv``: the grid value whose simulated CBOE PutWrite and BuyWrite come closest
  (mean absolute difference of annual returns) to the real PUT and BXM indices over the full real
  years inside the training years (2000..2012 at most: the real series shipped here ends in 2012).
  Fewer than ``MIN_YEARS`` such years: the config's value stays.

The shipped defaults are what this gives for training years to 2012
(scripts/studies/cboe_benchmarks.py --calibrate, scripts/studies/fit_iv_model.py).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from clstm_ppo.backtest.cboe import REAL_ANNUAL_RETURNS, REAL_YEARS, buywrite, putwrite
from clstm_ppo.backtest.report import yearly_metrics
from clstm_ppo.backtest.walk import buy_and_hold
from clstm_ppo.config import Config, DataConfig, MarketConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.folds import Fold
from clstm_ppo.market.inputs import fit_iv_model

GRID = [round(0.80 + 0.01 * i, 2) for i in range(26)]
PAIRS = (("putwrite", "PUT"), ("buywrite", "BXM"), ("buy_and_hold", "SPXTR"))
MIN_YEARS = 3  # whole real years a calibration needs; fewer and the config's value stays
IV_REFERENCE = "sp500"  # the built-in with a real implied-vol series (the VIX)


def cboe_data(train_end: str | None = None, val_end: str | None = None) -> MarketData:
    """The embedded S&P 500 with the shortest warm-up (its walks start 1999-02-22), split
    at the given dates. Calibrations walk only its training split, so its later splits may be
    empty: a fold of the Dow stocks validates and tests after the S&P 500's last bar."""
    return build_market_data(
        DataConfig(
            source=IV_REFERENCE,
            turbulence_lookback=20,
            window=1,
            train_end=train_end,
            val_end=val_end,
        ),
        needed=("train",),
    )


WALKS = {"putwrite": putwrite, "buywrite": buywrite, "buy_and_hold": buy_and_hold}


def annual_returns(
    data: MarketData, split: str, atm_per_iv: float | None, policies: tuple[str, ...] = tuple(WALKS)
) -> dict[str, dict[int, float]]:
    """Policy -> calendar year -> return (%) of one continuous walk over ``split`` ("all": the whole
    data), for each of ``policies``."""
    cfg = Config()
    if atm_per_iv is not None:
        cfg = dataclasses.replace(
            cfg, market=dataclasses.replace(cfg.market, atm_per_iv=atm_per_iv)
        )
    if split == "all":
        # one walk from the first bar to the last; the market still fits on the training split
        data = dataclasses.replace(data, splits={**data.splits, "all": (0, len(data.dates))})
    out = {}
    for name in policies:
        years = yearly_metrics(WALKS[name](data, split, cfg))
        out[name] = {y: 100.0 * m[data.symbols[0]]["total_return"] for y, m in years.items()}
    return out


def agreement(sim: dict[int, float], real: str, years: list[int]) -> dict[str, float]:
    """MAD (points) and years of the same sign, simulated against a real index over ``years``."""
    s = np.array([sim[y] for y in years])
    r = np.array([REAL_ANNUAL_RETURNS[real][REAL_YEARS.index(y)] for y in years])
    return {
        "mad": float(np.abs(s - r).mean()),
        "same_sign": int((np.sign(s) == np.sign(r)).sum()),
        "years": len(years),
    }


def calibrate(data: MarketData, years: list[int], grid: list[float] = GRID) -> list[dict[str, Any]]:
    """MADs of PutWrite vs PUT and BuyWrite vs BXM at each grid value over ``years``, from walks of
    the training split (the market sees no later bar)."""
    indices = PAIRS[:2]  # the two option indices only: buy-and-hold does not depend on atm_per_iv
    rows = []
    for x in grid:
        returns = annual_returns(data, "train", x, tuple(name for name, _ in indices))
        mads = {name: agreement(returns[name], real, years)["mad"] for name, real in indices}
        rows.append(
            {
                "atm_per_iv": x,
                **{f"{n}_mad": v for n, v in mads.items()},
                "mean_mad": float(np.mean(list(mads.values()))),
            }
        )
    return rows


def calibration_years(train_end: str) -> list[int]:
    """The real index's whole years inside training years ending ``train_end`` (1999
    is partial here)."""
    last = int(train_end[:4]) if train_end[5:] >= "12-15" else int(train_end[:4]) - 1
    return [y for y in REAL_YEARS[1:] if y <= last]


def fold_market_settings(fold: Fold, data_cfg: DataConfig, market: MarketConfig) -> dict[str, Any]:
    """``market.iv_model_coefs`` and ``market.atm_per_iv`` refitted on ``fold``'s training years,
    with where they came from."""
    own = build_market_data(dataclasses.replace(data_cfg, **_dates(fold)))
    reference = (
        own
        if "iv" in own.bars
        # the IV model reads only the training years: the reference may end before the fold does
        else build_market_data(DataConfig(source=IV_REFERENCE, **_dates(fold)), needed=("train",))
    )
    coefs = [round(float(c), 4) for c in fit_iv_model(reference, market)]
    years = calibration_years(fold.train_end)
    atm, mad = market.atm_per_iv, None
    if len(years) >= MIN_YEARS:
        best = min(
            calibrate(cboe_data(fold.train_end, fold.val_end), years), key=lambda r: r["mean_mad"]
        )
        atm, mad = best["atm_per_iv"], best["mean_mad"]
    return {
        "iv_model_coefs": coefs,
        "iv_model_source": "own iv column" if reference is own else IV_REFERENCE,
        "atm_per_iv": atm,
        "atm_per_iv_years": [years[0], years[-1]] if years else None,
        "atm_per_iv_mad": mad,
    }


def fold_overrides(fold: Fold, fit: dict[str, Any]) -> list[str]:
    """``fold``'s dates and its ``fold_market_settings`` as ``--set`` values for train,
    evaluate and the studies."""
    return [
        *fold.settings(),
        f"market.iv_model_coefs={json.dumps(fit['iv_model_coefs'])}",
        f"market.atm_per_iv={fit['atm_per_iv']}",
    ]


def _dates(fold: Fold) -> dict[str, str]:
    return {"train_end": fold.train_end, "val_end": fold.val_end, "test_end": fold.test_end}
