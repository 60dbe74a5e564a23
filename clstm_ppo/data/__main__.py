"""``python -m clstm_ppo.data --data sp500``: what the pipeline makes of a data source."""

from __future__ import annotations

import argparse
import sys

from clstm_ppo.cli import add_config_arguments, config_from_args, run_cli
from clstm_ppo.config import MarketConfig
from clstm_ppo.data.dataset import SPLITS, MarketData
from clstm_ppo.data.planted import planted_surface_notice
from clstm_ppo.data.stale import market_stale_opens
from clstm_ppo.env.tradability import untradable_notice
from clstm_ppo.market.inputs import market_inputs
from clstm_ppo.market.observed import OPTION_FEATURE_NAMES, observed_market_data

# Where the implied vol the env prices with (and the option features
# read) comes from (docs/MARKET.md).
IV_ORIGIN = {
    "column": (
        "the data's implied-vol column (the VIX for the embedded S&P 500, else a file's iv/vix)"
    ),
    "model": (
        "the EWMA model fitted on the training split (no implied-vol column, or "
        "market.iv_source model)"
    ),
}


def summary(data: MarketData, market: MarketConfig | None = None) -> str:
    """What the pipeline makes of ``data``: its splits, then every feature the agent observes (with
    ``market``, where the implied vol of the option features comes from)."""
    lines = [
        f"underlyings: {', '.join(data.symbols)}  |  bars after warm-up: {len(data.dates)}  |  "
        f"window: {data.window}",
        data.clock.describe(),
    ]
    stale = market_stale_opens(data)
    width = len(data.clock.label(data.dates[0]))  # a date, or an intraday bar's timestamp
    lines.append(
        f"{'split':<11} {'rows':>6}  {'first':<{width}}  {'last':<{width}}  "
        f"{'turbulent bars':>14}  {'stale opens':>14}"
    )
    for name in SPLITS:
        start, end = data.splits[name]
        first, last = data.split_dates(name)
        over = int((data.turbulence[start:end] > data.turbulence_threshold).sum())
        flat = int(stale[:, start:end].sum())
        lines.append(
            f"{name:<11} {end - start:>6}  {data.clock.label(first):<{width}}  "
            f"{data.clock.label(last):<{width}}  "
            f"{over:>6} ({over / (end - start):5.1%})  {flat:>6} "
            f"({flat / stale[:, start:end].size:5.1%})"
        )
    lines.append(
        "stale open: a bar that opens at the previous close after the market was shut (every daily "
        "bar of an exchange was); orders for it fill at its close instead"
    )
    lines.append(f"turbulence threshold (training-split quantile): {data.turbulence_threshold:.4f}")
    lines.append("")
    lines.append(
        f"{'feature':<20} {'train mean':>11} {'train std':>10} {'min':>10} {'max':>10}"
        f" {'val z-mean':>10} {'test z-mean':>11}"
    )
    train, val, test = (slice(*data.splits[n]) for n in SPLITS)
    for i, name in enumerate(data.feature_names):
        raw = data.raw_features[:, train, i]
        lines.append(
            f"{name:<20} {raw.mean():>11.4f} {raw.std():>10.4f} {raw.min():>10.4f} "
            f"{raw.max():>10.4f} {data.features[:, val, i].mean():>10.3f} "
            f"{data.features[:, test, i].mean():>11.3f}"
        )
    lines.append(
        "(z-mean: mean of the normalised feature; training statistics are applied to every split)"
    )
    if market is not None and any(name in data.feature_names for name in OPTION_FEATURE_NAMES):
        lines.append(
            f"option-market features ({', '.join(OPTION_FEATURE_NAMES)}): the 30-day at-the-money "
            f"implied vol from {IV_ORIGIN[market_inputs(data, market).iv_source]}, its premium "
            "over realized vol, its 5- and 20-bar changes and its z-score over a year"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clstm_ppo.data", description=__doc__)
    parser.add_argument(
        "--data", default=None, help="sp500, dow, synthetic, a CSV/parquet file or a folder of them"
    )
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    cfg = config_from_args(args)
    if args.data is not None:
        cfg.data.source = args.data
    # the features the agent observes, the option market's included
    data = observed_market_data(cfg)
    print(summary(data, cfg.market))
    notice = untradable_notice(data, SPLITS, cfg.market, cfg.env)
    if notice:
        print(notice)
    notice = planted_surface_notice(cfg)
    if notice:
        print(notice)
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
