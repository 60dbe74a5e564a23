"""Is there anything in the market's state that should move an option seller's decisions off the best fixed rule?
The simplest test: a fixed rule per regime of one signal (implied volatility by default) against best_rule, on
walk-forward folds.

    python scripts/studies/regime_rules.py [--data sp500] [--folds 3] [--regimes 2]
        [--signal iv|vrp|realized_vol|rsi|...] [--pick walked|days] [--placebos 10] [--json]

For each fold (clstm_ppo/data/folds.py, the market refitted on the fold's training years as reproduce_paper does):
the 147 rules of best_rule's family are walked over the validation years and best_rule is the best Sharpe over the
T-bill there. The regime is a signal at a bar's close, cut at its training years' quantiles
(clstm_lab.studies.regime_policies): the underlying's implied volatility (the VIX, which no agent observes), ``vrp``
(implied less realized volatility: the premium an option seller is paid), or one of the agents' own market features
by name (``realized_vol``, ``turbulence``, ``sma_ratio_30``, ``rsi``, ...). ``--pick walked`` (2 regimes): of all
147 x 147 pairs (rule while low, rule while high), the one whose switching walk over the validation years scores
best, path and all;
``--pick days``: each regime's best rule on the validation days that start in it. The same pick is made on
``--placebos`` random regimes (a label per bar, in equal shares, carrying no information). Then best_rule, the
signal's pick and the placebo picks are walked over the validation years (in sample) and the test years (out of
sample), with the signal pick's low-regime rule followed at every bar (what the switching adds beyond another rule).
If the signal carried what a decision needs, its pick would beat best_rule and its own low-regime rule on test,
and by more than the placebo picks do: they measure what choosing among more policies gains on noise alone.
"""
from __future__ import annotations

import argparse
import sys

import torch

from clstm_lab.studies.regime_policies import PICK_METRIC, SIGNALS
from clstm_lab.studies.regime_rules import regime_study
from clstm_ppo.config import ConfigError
from clstm_ppo.data.errors import DataError
from clstm_ppo.tables import print_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="sp500",
                        help="a data source (--signal iv and vrp need its implied volatility, an iv column)")
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--regimes", type=int, default=2, help="regimes of the signal, cut at training quantiles")
    parser.add_argument("--signal", choices=SIGNALS, default="iv",
                        help="the regimes' signal: implied volatility (the VIX), vrp (implied less realized) "
                             "or an agent feature")
    parser.add_argument("--placebos", type=int, default=10, help="random-regime picks to compare against")
    parser.add_argument("--pick", choices=("walked", "days"), default="walked",
                        help="walked: the pair of rules whose switching walk scores best (2 regimes only); days: "
                             "each regime's best rule on its own days")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:  # the walks are short and vectorised over the rules: a CPU walks them in seconds
        rows = regime_study(args.data, args.folds, args.regimes, args.signal, args.placebos, args.pick, "cpu")
    except (ConfigError, DataError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print_table(rows, args.json, {"data": args.data, "regimes": args.regimes, "signal": args.signal, "pick": args.pick,
                                  "placebos": args.placebos,
                                  "metric": f"{PICK_METRIC} (Sharpe over the T-bill), mean over underlyings"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
