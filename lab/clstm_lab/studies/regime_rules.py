"""A fixed rule per regime of one market signal against best_rule on walk-forward folds, with placebo regimes to
measure what choosing among more rules gains on noise alone (scripts/studies/regime_rules.py prints it;
docs/RESULTS.md reads it)."""
from __future__ import annotations

import numpy as np
import torch

from clstm_lab.studies.regime_policies import (
    PICK_METRIC,
    pick_pair_walked,
    pick_per_regime,
    placebo_regimes,
    signal_cuts,
    signal_regimes,
)
from clstm_ppo.backtest.calibration import fold_market_settings, fold_overrides
from clstm_ppo.backtest.conditional import switching_policy
from clstm_ppo.backtest.rules import PICK_SPLIT, rank_walks, rule_family, walk_family
from clstm_ppo.backtest.walk import walk_batched
from clstm_ppo.config import Config, load_config
from clstm_ppo.data import build_market_data
from clstm_ppo.data.folds import walk_forward_folds
from clstm_ppo.env import ActionSpace


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
    policy = switching_policy(rules, choices, labels, [0, 0, 0, *range(1, len(labels))], actions, len(data.symbols),
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


def regime_study(data_source: str = "sp500", folds: int = 3, regimes: int = 2, signal: str = "iv",
                 placebos: int = 10, pick: str = "walked", device: torch.device | str = "cpu") -> list[dict]:
    """``study_fold``'s row for each walk-forward fold of ``data_source``, fold number first. ``pick`` "walked"
    walks every pair of rules, so it takes 2 regimes only; a ValueError says what is wrong with the settings."""
    if regimes < 2 or placebos < 0:
        raise ValueError("--regimes must be at least 2 and --placebos at least 0")
    if pick == "walked" and regimes != 2:
        raise ValueError(f"--pick walked walks every pair of rules, so 2 regimes only; use --pick days for {regimes}")
    device = torch.device(device)
    return [{"fold": i, **study_fold(cfg, regimes, signal, placebos, pick, device)}
            for i, cfg in enumerate(fold_configs(data_source, folds))]
