"""Systematic option buying held to expiry in the simulated market: mean P&L as % of premium, all costs.

    python scripts/studies/market_strategies.py [--data sp500] [--json]

Each strategy (ATM call, 1.05 call, ATM put, 0.95 put, ATM straddle; the 30-day expiry) is bought on every
eligible bar of each split at once through the real env and held to expiry (``clstm_lab.studies.held_to_expiry``).
Rows: strategy x split x source, where ``vix`` prices options with the data's real implied-vol column (the
embedded S&P 500's VIX) and ``model`` withholds it and uses the fitted EWMA model; a source without an iv
column has only the model rows. Columns: ``mean%`` (the headline: mean of per-entry P&L % of premium),
``pooled%`` (sum of P&L / sum of premium), ``n`` (entries that expired inside the split), the same mean per
volatility tercile (low/mid/high: the 1/3 and 2/3 quantiles of the training split's ATM implied vol of that
source, whichever split is measured) and ``iv%`` (mean ATM implied vol at entry). With --json the last line
is one JSON object with the same numbers.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
import torch

from clstm_lab.studies.held_to_expiry import STRATEGIES, TERCILES, run_strategies, summarize, tercile_cuts
from clstm_ppo.config import DataConfig, MarketConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.market.inputs import market_inputs
from clstm_ppo.tables import format_records

SOURCES = {"vix": "column", "model": "model"}  # row label -> MarketConfig.iv_source
SPLITS = ("train", "validation", "test")


def measure(data_name: str) -> dict[str, Any]:
    data = build_market_data(DataConfig(source=data_name))
    sources = {k: v for k, v in SOURCES.items() if v != "column" or "iv" in data.bars}
    rows, cuts = [], {}
    for label, iv_source in sources.items():
        market = MarketConfig(iv_source=iv_source)
        cut = tercile_cuts(market_inputs(data, market).iv_close, data)
        cuts[label] = [float(c) for c in cut]
        for split in SPLITS:
            for strategy, entries in run_strategies(data, split, market).items():
                s = summarize(entries, cut)
                row = {"strategy": strategy, "split": split, "source": label, "mean%": s["all"]["mean_pct"],
                       "pooled%": s["all"]["pooled_pct"], "n": s["all"]["count"]}
                for t in TERCILES:
                    row[f"{t}%"], row[f"{t}_n"] = s[t]["mean_pct"], s[t]["count"]
                row["iv%"] = s["all"]["iv_pct"]
                rows.append(row)
    order = {s: i for i, s in enumerate(STRATEGIES)}
    rows.sort(key=lambda r: (order[r["strategy"]], SPLITS.index(r["split"])))  # vix and model rows side by side
    dates = {split: [str(data.dates[a].date()), str(data.dates[b - 1].date())] for split, (a, b) in data.splits.items()}
    return {"data": data_name, "rows": rows, "tercile_cuts": cuts, "splits": dates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="sp500", help="a built-in name or a file, as train.py's --data")
    parser.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = measure(args.data)
    print(format_records(result["rows"]))
    for label, cut in result["tercile_cuts"].items():
        print(f"{label} terciles of the training split's ATM implied vol: low < {100 * cut[0]:.2f}% <= mid "
              f"< {100 * cut[1]:.2f}% <= high")
    print("splits: " + ", ".join(f"{k} {a}..{b}" for k, (a, b) in result["splits"].items()))
    if args.json:
        print(json.dumps(result | {"rows": [{k: None if isinstance(v, float) and np.isnan(v) else v
                                             for k, v in r.items()} for r in result["rows"]]}))  # NaN: null


if __name__ == "__main__":
    main()
