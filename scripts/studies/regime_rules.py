"""Is there anything in the market's state that should move an option seller's decisions off the best fixed rule?
The simplest test: a fixed rule per regime of one signal (implied volatility by default) against best_rule, on
walk-forward folds.

    python scripts/studies/regime_rules.py [--data sp500] [--folds 3] [--regimes 2]
        [--signal iv|vrp|realized_vol|rsi|...] [--pick walked|days] [--placebos 10] [--json]

For each fold (clstm_ppo/data/folds.py, the market refitted on the fold's training years as reproduce_paper does):
the 147 rules of best_rule's family are walked over the validation years and best_rule is the best Sharpe over the
T-bill there. The regime is a signal at a bar's close, cut at its training years' quantiles
(clstm_ppo/backtest/regimes.py): the underlying's implied volatility (the VIX, which no agent observes), ``vrp``
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

import numpy as np
import torch

from clstm_ppo.backtest.calibration import fold_market_settings, fold_overrides
from clstm_ppo.backtest.regimes import (
    PICK_METRIC,
    SIGNALS,
    pick_pair_walked,
    pick_per_regime,
    placebo_regimes,
    regime_policy,
    signal_cuts,
    signal_regimes,
)
from clstm_ppo.backtest.rules import PICK_SPLIT, rank_walks, rule_family, walk_family
from clstm_ppo.backtest.walk import walk_batched
from clstm_ppo.config import Config, ConfigError, load_config
from clstm_ppo.data import build_market_data
from clstm_ppo.data.errors import DataError
from clstm_ppo.data.folds import walk_forward_folds
from clstm_ppo.env import ActionSpace
from clstm_ppo.tables import print_table


def fold_configs(data_source: str, folds: int) -> list[Config]:
    """Each walk-forward fold's config: its dates and the market refitted on its training years."""
    base = load_config(None, [f"data.source={data_source}"])
    dates = build_market_data(base.data).dates
    out = []
    for fold in walk_forward_folds(dates, folds):
        fit = fold_market_settings(fold, base.data, base.market)
        out.append(load_config(None, [f"data.source={data_source}", *fold_overrides(fold, fit)]))
    return out


def study_fold(cfg: Config, regimes: int, signal: str, placebos: int, pick: str, device: torch.device) -> dict:
    """best_rule, the signal-regime rules and the placebo-regime rules picked on the validation years, each
    walked over the validation and the test years: their Sharpe over the T-bill (mean over underlyings)."""
    data = build_market_data(cfg.data)
    actions = ActionSpace.from_config(cfg.market)
    rules = rule_family(actions)
    walks = walk_family(data, PICK_SPLIT, cfg, device)
    names = list(walks)
    best = rank_walks(walks, PICK_METRIC)[1][0]
    placebo_labels = [placebo_regimes(data, regimes, seed) for seed in range(placebos)]
    labels = [signal_regimes(data, regimes, signal), *placebo_labels]
    if pick == "walked":  # every pair walked as the switching policy it is: its validation Sharpe is what it made
        chosen = [pick_pair_walked(rules, list(range(len(rules))), label, data, cfg, device) for label in labels]
    else:  # each regime's best rule on the days that start in it
        chosen = [pick_per_regime(walks, data, label, regimes, best) for label in labels]
    # The signal pick's low-regime rule followed at every bar: what the switching adds beyond choosing another rule.
    walked = ["best_rule", "signal_regimes", "low_rule_alone", *(f"placebo_{k}" for k in range(placebos))]
    choices = [[best] * regimes, chosen[0], [chosen[0][0]] * regimes, *chosen[1:]]
    policy = regime_policy(rules, choices, labels, [0, 0, 0, *range(1, len(labels))], actions, len(data.symbols),
                           cfg.env.max_positions, device)
    sharpe = {split: rank_walks(walk_batched(walked, *policy, data, split, cfg, device), PICK_METRIC)[0]
              for split in (PICK_SPLIT, "test")}
    test_start, test_end = data.split_dates("test")
    first, end = data.splits["test"]
    placebo = {split: np.asarray(sharpe[split][3:]) for split in sharpe}
    return {
        "test_years": f"{test_start.year}..{test_end.year}",
        "best_rule": names[best],
        "signal_rules": " | ".join(names[k] for k in chosen[0]),
        "cuts": " ".join(f"{c:.3f}" for c in signal_cuts(data, regimes, signal).mean(axis=0)),
        "top_regime_test_days": float(np.mean(labels[0][:, first:end] == regimes - 1)),
        **{f"{split}_{name}": sharpe[split][i] for split in (PICK_SPLIT, "test")
           for i, name in enumerate(walked[:3])},
        **{f"{split}_placebo_median": float(np.median(placebo[split])) if placebos else float("nan")
           for split in (PICK_SPLIT, "test")},
        "test_placebos_at_or_above_signal": int(np.sum(placebo["test"] >= sharpe["test"][1])),
        "test_placebos_above_best": int(np.sum(placebo["test"] > sharpe["test"][0])),
    }


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
    if args.regimes < 2 or args.placebos < 0:
        parser.error("--regimes must be at least 2 and --placebos at least 0")
    if args.pick == "walked" and args.regimes != 2:
        parser.error(f"--pick walked walks every pair of rules, so 2 regimes only; use --pick days for {args.regimes}")
    torch.set_num_threads(1)
    device = torch.device("cpu")  # the walks are short and vectorised over the rules: a CPU walks them in seconds
    try:
        rows = [{"fold": i, **study_fold(cfg, args.regimes, args.signal, args.placebos, args.pick, device)}
                for i, cfg in enumerate(fold_configs(args.data, args.folds))]
    except (ConfigError, DataError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print_table(rows, args.json, {"data": args.data, "regimes": args.regimes, "signal": args.signal, "pick": args.pick,
                                  "placebos": args.placebos,
                                  "metric": f"{PICK_METRIC} (Sharpe over the T-bill), mean over underlyings"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
