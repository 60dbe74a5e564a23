"""The simulated CBOE PutWrite and BuyWrite against the real PUT and BXM indices, year by year.

    python scripts/studies/cboe_benchmarks.py [--atm-per-iv X] [--calibrate] [--json]

Walks the embedded S&P 500 once, 1999-2018, with ``putwrite``, ``buywrite`` and ``buy_and_hold``
(``clstm_ppo.backtest``) and prints each calendar year's return (%) beside the real index's (to 2012), the
differences, then the mean absolute difference (MAD) and the years of the same sign over the training years
(the split ends 2012-12-31). 1999 is partial: the data starts on 1999-01-04 and its indicators need 34 bars,
so the walk starts on 1999-02-22 (with ``data.turbulence_lookback=20`` and ``data.window=1``: the market
reads no features, and the defaults, 252 and 30, would start it in February 2000); the full years are
2000-2012. ``--atm-per-iv`` prices at another ``market.atm_per_iv`` (default: the config's); ``--calibrate``
prints the grid 0.80..1.05 that chose it, on training-split walks only. With --json the last line is one
JSON object with every number.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

from clstm_ppo.backtest.calibration import PAIRS, agreement, annual_returns, calibrate, calibration_years, cboe_data
from clstm_ppo.backtest.cboe import REAL_ANNUAL_RETURNS as REAL
from clstm_ppo.backtest.cboe import REAL_YEARS
from clstm_ppo.config import Config
from clstm_ppo.tables import format_records

TRAINING = list(REAL_YEARS)  # the embedded S&P 500's training split is 1999..2012-12-31
FULL = calibration_years("2012-12-31")  # 1999 is partial (from 1999-02-22)


def scores(returns: dict[str, dict[int, float]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per policy: its agreement over the 14 training years (1999 partial) and over the 13 full ones."""
    return {name: {"training_14": agreement(returns[name], real, TRAINING),
                   "full_13": agreement(returns[name], real, FULL)} for name, real in PAIRS}


def year_rows(returns: dict[str, dict[int, float]]) -> list[dict[str, Any]]:
    rows = []
    for y in sorted(returns["putwrite"]):
        row: dict[str, Any] = {"year": f"{y}*" if y == 1999 else str(y)}
        for name, real in PAIRS:
            value = REAL[real][REAL_YEARS.index(y)] if y in REAL_YEARS else None
            row[name] = returns[name][y]
            row[real] = value
            if name != "buy_and_hold":
                row[f"{name}-{real}"] = None if value is None else returns[name][y] - value
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--atm-per-iv", type=float, default=None, help="market.atm_per_iv (default: the config's)")
    parser.add_argument("--calibrate", action="store_true", help="print the grid of MADs on the training split")
    parser.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = cboe_data()
    out: dict[str, Any] = {"command": " ".join(["python", *sys.argv]), "data": "sp500"}
    if args.calibrate:
        grid = calibrate(data, FULL)
        best = min(grid, key=lambda r: r["mean_mad"])
        print(format_records(grid, digits=2))
        print(f"best atm_per_iv on the full training years 2000-2012: {best['atm_per_iv']:.2f} "
              f"(mean MAD {best['mean_mad']:.2f} points)\n")
        out |= {"calibration": grid, "best_atm_per_iv": best["atm_per_iv"]}
    atm = Config().market.atm_per_iv if args.atm_per_iv is None else args.atm_per_iv
    returns = annual_returns(data, "all", atm)
    rows, agree = year_rows(returns), scores(returns)
    print(format_records(rows))
    first = data.dates[0].date()
    print(f"market.atm_per_iv {atm:.2f}; * 1999 from {first} (partial); real numbers to 2012; returns in %")
    for name, real in PAIRS:
        a, b = agree[name]["training_14"], agree[name]["full_13"]
        print(f"{name} vs {real}: MAD {a['mad']:.2f} points, same sign {a['same_sign']}/{a['years']} (1999-2012); "
              f"MAD {b['mad']:.2f}, same sign {b['same_sign']}/{b['years']} (2000-2012)")
    if args.json:
        print(json.dumps(out | {"atm_per_iv": atm, "rows": rows, "training": agree}))


if __name__ == "__main__":
    main()
