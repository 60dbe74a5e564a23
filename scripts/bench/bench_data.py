"""Time to load and featurise the embedded S&P 500 series and a 100,000-bar synthetic series.

    python scripts/bench/bench_data.py [--json]
"""
from __future__ import annotations

import argparse
import time

from clstm_ppo.config import DataConfig, SyntheticConfig
from clstm_ppo.data import build_market_data, load_bars
from clstm_ppo.tables import print_table


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cases = {
        "sp500 (embedded)": DataConfig(source="sp500"),
        "synthetic 100k bars": DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=100_000)),
        "synthetic 100k bars x 4": DataConfig(source="synthetic",
                                              synthetic=SyntheticConfig(n_bars=100_000, n_underlyings=4)),
    }
    rows = []
    for name, cfg in cases.items():
        load_s = best_of(args.repeats, lambda cfg=cfg: load_bars(cfg.source, cfg.symbols, cfg.synthetic))
        total_s = best_of(args.repeats, lambda cfg=cfg: build_market_data(cfg))
        data = build_market_data(cfg)
        bars = len(data.dates) * len(data.symbols)
        rows.append({"series": name, "bars": bars, "load_s": load_s, "load+featurise_s": total_s,
                     "bars_per_s": bars / total_s})
    print_table(rows, args.json)


if __name__ == "__main__":
    main()
