"""The planted market's known answer, walked: the oracle against every unconditional fixed rule and the conditional
rules (scripts/studies/planted_market.py writes the rows; docs/PLANTED.md).

Every policy walks the same validation and test years of one planted market through the backtest's env, costs
on. ``best_rule`` and ``best_conditional_rule`` are picked on the validation years, as evaluate picks them; the
largest test Sharpe of any unconditional rule (picked after the fact) says how close any rule gets.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from clstm_ppo.backtest.conditional import LABEL as CONDITIONAL
from clstm_ppo.backtest.conditional import conditional_policy, pick_conditional_rule
from clstm_ppo.backtest.oracle import oracle_policy
from clstm_ppo.backtest.report import underlying_metrics
from clstm_ppo.backtest.rules import PICK_SPLIT, pick_from_walks, rank_walks, rule_family, walk_family
from clstm_ppo.backtest.walk import walk_together
from clstm_ppo.config import Config, load_config
from clstm_ppo.env import ActionSpace
from clstm_ppo.market.observed import observed_market_data

METRIC = "sharpe_excess"
SPLITS = (PICK_SPLIT, "test")
KEYS = ("sharpe_excess", "annual_return", "annual_vol", "max_drawdown", "trades")


def planted_config(overrides: Sequence[str] = ()) -> Config:
    """The default run's settings on the planted market, with ``overrides`` (key=value) on top."""
    return load_config("planted", list(overrides))


def _row(policy: str, kind: str, walks: dict, split_names: dict[str, str]) -> dict:
    row: dict = {"policy": policy, "kind": kind}
    for split in SPLITS:
        metrics = underlying_metrics(walks[split][split_names[split]], 0)
        row |= {f"{split}_{key}": metrics[key] for key in KEYS}
    return row


def planted_study(overrides: Sequence[str] = (), device: torch.device | str = "cpu") -> dict:
    """Rows (oracle, best_rule, best_conditional_rule, then every unconditional rule) with their validation and test
    metrics, and the summary: the oracle's test Sharpe over the T-bill less best_rule's and less the largest of
    any unconditional rule."""
    cfg = planted_config(overrides)
    data = observed_market_data(cfg)
    rules = rule_family(ActionSpace.from_config(cfg.market))
    family = {split: walk_family(data, split, cfg, device) for split in SPLITS}
    best = pick_from_walks(rules, family[PICK_SPLIT], data, METRIC, PICK_SPLIT, "best_rule")
    conditional = pick_conditional_rule(data, cfg, device, METRIC)
    picked = {split: walk_together({"oracle": oracle_policy(data, cfg, device),
                                    CONDITIONAL: conditional_policy(conditional, data, cfg, device)},
                                   data, split, cfg, device) for split in SPLITS}
    rows = [_row("oracle", "oracle", picked, {s: "oracle" for s in SPLITS}),
            _row(f"best_rule: {best.name}", "best_rule", family, {s: best.name for s in SPLITS}),
            _row(f"{CONDITIONAL}: {conditional.name}", CONDITIONAL, picked, {s: CONDITIONAL for s in SPLITS})]
    rows += [_row(name, "rule", family, {s: name for s in SPLITS}) for name in family["test"]]
    test_scores, order = rank_walks(family["test"], METRIC)
    oracle = rows[0]["test_sharpe_excess"]
    summary = {"oracle_test_sharpe": oracle, "best_rule": best.name,
               "best_rule_test_sharpe": rows[1]["test_sharpe_excess"],
               "oracle_less_best_rule": oracle - rows[1]["test_sharpe_excess"],
               "best_conditional_rule": conditional.name,
               "best_conditional_rule_test_sharpe": rows[2]["test_sharpe_excess"],
               "top_unconditional_rule_after_the_fact": list(family["test"])[order[0]],
               "oracle_less_top_unconditional": oracle - test_scores[order[0]],
               "rules": len(rules), "conditional_rules": conditional.tried,
               "test_years": f"{data.split_dates('test')[0].date()}..{data.split_dates('test')[1].date()}",
               "overrides": list(overrides)}
    return {"summary": summary, "rows": rows}
