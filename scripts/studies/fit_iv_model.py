"""Fit the implied-vol model (log IV = a + b log sigma_ewma + c leverage) on a source with a real IV series,
over its training split only, and show how it does on every split against that series.

    python scripts/studies/fit_iv_model.py [--data sp500] [--json]

The coefficients it prints for the embedded S&P 500 with the VIX are the shipped default,
``market.iv_model_coefs`` (docs/MARKET.md section 3).
"""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from clstm_ppo.config import DataConfig, MarketConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.data.dataset import SPLITS
from clstm_ppo.market.inputs import fit_iv_model, market_inputs
from clstm_ppo.tables import print_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="sp500", help="a source with an iv/vix column (default: sp500 + VIX)")
    parser.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    args = parser.parse_args()
    data = build_market_data(DataConfig(source=args.data))
    market = MarketConfig()
    coefs = fit_iv_model(data, market)
    real = market_inputs(data, dataclasses.replace(market, iv_source="column")).iv_close
    model = market_inputs(data, dataclasses.replace(market, iv_source="model", iv_model_coefs=coefs)).iv_close
    rows = []
    for name in SPLITS:
        part = slice(*data.splits[name])
        error = np.log(model[:, part]) - np.log(real[:, part])
        rows.append({"split": name, "bars": int(error.size), "mean_real_iv": float(real[:, part].mean()),
                     "mean_model_iv": float(model[:, part].mean()), "log_error_mean": float(error.mean()),
                     "log_error_rmse": float(np.sqrt((error ** 2).mean())),
                     "corr_daily_change": float(np.corrcoef(np.diff(np.log(model[:, part])).ravel(),
                                                            np.diff(np.log(real[:, part])).ravel())[0, 1])})
    print_table(rows, args.json, {"coefs_a_b_c": [round(c, 4) for c in coefs], "fitted_on": "train split only",
                                  "data": args.data, "ewma_lambda": market.ewma_lambda,
                                  "leverage_lambda": market.leverage_lambda})


if __name__ == "__main__":
    main()
