"""Is strategy A's Sharpe ratio over the T-bill higher than B's? Ledoit and Wolf's test on paired daily returns.

    python scripts/studies/sharpe_test.py A.csv B.csv [--a-column agent] [--b-column best_rule] [--excess]
        [--resamples 4999] [--seed 0] [--json]

A.csv and B.csv are what ``evaluate --returns`` wrote (walk both on the same split, or with the same --folds, so
the test years are laid end to end and each day is used once); one file may serve for both with two columns. Each
file's ``tbill`` column gives the T-bill (``--excess``: the returns are over it already). Prints both Sharpe ratios,
the difference A - B with its HAC standard error, the studentized circular-block-bootstrap 95% interval and p-value
(H0: no difference), and the largest edge of A over B the data do not rule out at 95%. Seeds of one configuration
enter as one policy (evaluate --ensemble), never as separate series. docs/BACKTEST.md, "Is the difference real?".
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clstm_lab.studies.sharpe_inputs import SharpeInputError, paired_returns
from clstm_ppo.backtest.sharpe_difference import sharpe_difference
from clstm_ppo.tables import print_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path, help="strategy A's returns CSV (evaluate --returns)")
    parser.add_argument("b", type=Path, help="strategy B's returns CSV")
    parser.add_argument("--a-column", help="A's column, where its file holds several policies")
    parser.add_argument("--b-column", help="B's column, where its file holds several policies")
    parser.add_argument("--excess", action="store_true", help="the returns are over the T-bill already")
    parser.add_argument("--resamples", type=int, default=4999, help="bootstrap resamples (default 4999)")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    parser.add_argument("--json", action="store_true", help="print every number as one JSON object last")
    args = parser.parse_args(argv)
    try:
        if args.resamples < 99:
            raise SharpeInputError(f"--resamples {args.resamples}: use at least 99 (4999 for a 95% interval's ends)")
        pair = paired_returns(args.a, args.b, args.a_column, args.b_column, args.excess)
        test = sharpe_difference(pair.a, pair.b, resamples=args.resamples, seed=args.seed)
    except (SharpeInputError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{pair.a_name} ({args.a.name}) - {pair.b_name} ({args.b.name}), Sharpe over the T-bill, "
          f"{pair.dates[0].date()}..{pair.dates[-1].date()}")
    row = {"sharpe_a": test.sharpe_a, "sharpe_b": test.sharpe_b, "difference": test.difference,
           "hac_se": test.hac_se, "ci_low": test.ci_low, "ci_high": test.ci_high, "p_value": test.p_value,
           "edge_ruled_out": test.edge_ruled_out}
    print_table([row], args.json, {"a": pair.a_name, "b": pair.b_name, "days": test.days,
                                   "correlation": round(test.correlation, 4), "block_length": test.block_length,
                                   "resamples": test.resamples, "level": test.level})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
