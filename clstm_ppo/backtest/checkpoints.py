"""Backtest checkpoints from Python: each checkpoint's greedy walk over a split (or its walk-forward
folds laid end to end) beside every benchmark on the same bars, returned as results and as the
report that ``python -m clstm_ppo.evaluate --json`` writes (docs/BACKTEST.md).

    from clstm_ppo.backtest.checkpoints import backtest_checkpoints
    done = backtest_checkpoints(["runs/fold0/best_composite.pt"], split="test")
    done.report["agent"]["sharpe_excess"]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from clstm_ppo.agent.from_checkpoint import load_agent
from clstm_ppo.backtest.cboe import buywrite, putwrite
from clstm_ppo.backtest.conditional import LABEL as CONDITIONAL
from clstm_ppo.backtest.conditional import conditional_policy, pick_conditional_rule
from clstm_ppo.backtest.ensemble import ENSEMBLE, Agent, check_members, group_folds, walk_ensemble
from clstm_ppo.backtest.policies import (
    agent_policy,
    cash_policy,
    long_straddle,
    macd_rule,
    random_policy,
)
from clstm_ppo.backtest.report import across_checkpoints, report_dict, underlying_metrics
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.rules import RulePick, pick_rule, rules_policy
from clstm_ppo.backtest.scaled_rules import scaled_rule
from clstm_ppo.backtest.stitch import stitch
from clstm_ppo.backtest.walk import buy_and_hold, walk, walk_together
from clstm_ppo.config import Config, ConfigError, to_dict
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.device import configure_backends, keep_freed_host_memory, pick_device
from clstm_ppo.env import ActionSpace
from clstm_ppo.env.tradability import untradable_line


@dataclass
class Backtest:
    """One backtest: every policy's walk by name, the checkpoints' (first) config, the rule picked
    on the validation years (one split's walk; each fold's is in ``report["folds"]``), the
    conditional rule picked beside it, and ``report``, what --json writes."""

    results: dict[str, WalkResult]
    config: Config
    report: dict[str, Any]
    rule: RulePick | None = None
    conditional_rule: RulePick | None = None
    # the line saying which offered orders the account cannot hold (tradability)
    untradable: str | None = None


def benchmarks(
    data: MarketData,
    split: str,
    cfg: Config,
    device: torch.device,
    seed: int,
    best_rule: RulePick,
    best_conditional: RulePick | None = None,
) -> dict[str, WalkResult]:
    """Every benchmark on the same walk: the underlying, CBOE's PutWrite and BuyWrite
    (simulated directly, not through the action space), cash, random valid actions, two option
    rules, ``best_rule`` (``pick_rule``) and ``best_conditional_rule``
    (``pick_conditional_rule``) where given."""
    actions, slots = ActionSpace.from_config(cfg.market), cfg.env.max_positions
    rules = {
        "cash": cash_policy(),
        "random": random_policy(seed),
        "macd_rule": macd_rule(data, actions, slots),
        "long_straddle": long_straddle(actions, slots),
        "best_rule": rules_policy([best_rule.rule], actions, len(data.symbols), slots, device),
    }
    if best_conditional is not None:
        rules[CONDITIONAL] = conditional_policy(best_conditional, data, cfg, device)
    out = {
        "buy_and_hold": buy_and_hold(data, split, cfg),
        "putwrite": putwrite(data, split, cfg),
        "buywrite": buywrite(data, split, cfg),
    }
    return out | walk_together(rules, data, split, cfg, device)


def agent_names(seeds: int) -> list[str]:
    return ["agent"] if seeds == 1 else [f"agent_{i + 1}" for i in range(seeds)]


def walk_agents(
    names: list[str],
    agents: Sequence[Agent],
    data: MarketData,
    split: str,
    device: torch.device,
    ensemble: bool,
) -> dict[str, WalkResult]:
    """Each agent's greedy walk over ``split`` of ``data`` (each agent's own where ``data`` is
    None), then with ``ensemble`` their ensemble's."""
    results = {}
    for name, (agent_cfg, agent_data, model) in zip(names, agents, strict=True):
        market = agent_data if data is None else data
        policy, state = agent_policy(model, len(market.symbols), device)
        results[name] = walk(
            name,
            policy,
            state,
            market,
            split,
            agent_cfg,
            device,
            scaled_rule(agent_cfg, market, device),
        )
    if ensemble:
        cfg, own, _ = agents[0]  # check_members made every member's walk this one
        results[ENSEMBLE] = walk_ensemble(
            [model for _, _, model in agents], own if data is None else data, split, cfg, device
        )
    return results


def seed_summary(results: dict[str, WalkResult], names: list[str]) -> dict | None:
    """Mean +- std across the checkpoints' walks, per underlying; None for one checkpoint."""
    if len(names) < 2:
        return None
    return {
        symbol: across_checkpoints([underlying_metrics(results[n], s) for n in names])
        for s, symbol in enumerate(results[names[0]].symbols)
    }


def load_agents(
    checkpoints: Sequence[str],
    data: str | None = None,
    overrides: Sequence[str] = (),
    device: str = "auto",
) -> tuple[list[Agent], torch.device]:
    """Each checkpoint's agent on the device ``device`` names (docs/BACKTEST.md)."""
    if not checkpoints:
        raise ConfigError("no checkpoint to backtest: give at least one checkpoint file")
    picked = pick_device(device)
    configure_backends(picked)
    keep_freed_host_memory()
    return [load_agent(str(path), data, list(overrides), picked) for path in checkpoints], picked


def given_or_loaded(
    agents: list[Agent] | None,
    checkpoints: Sequence[str],
    data: str | None,
    overrides: Sequence[str],
    device: str,
) -> tuple[list[Agent], torch.device]:
    """``agents`` as given (already loaded by the caller) with the device they sit on,
    else ``load_agents``."""
    if agents is None:
        return load_agents(checkpoints, data, overrides, device)
    return agents, next(agents[0][2].parameters()).device


def check_one_setup(checkpoints: Sequence[str], agents: Sequence[Agent], ensemble: bool) -> None:
    """Checkpoints walked side by side share their data and market settings; an ensemble's also the
    rest of the walk and the normaliser."""
    if ensemble:
        check_members(list(checkpoints), list(agents))
    cfg = agents[0][0]
    for path, (other, _, _) in zip(checkpoints[1:], agents[1:], strict=True):
        if to_dict(other.data) != to_dict(cfg.data) or to_dict(other.market) != to_dict(cfg.market):
            raise ConfigError(
                f"{path} and {checkpoints[0]} have different data or market settings; "
                "compare checkpoints of one setup in one command"
            )


def backtest_checkpoints(
    checkpoints: Sequence[str],
    *,
    split: str = "test",
    data: str | None = None,
    overrides: Sequence[str] = (),
    folds: bool = False,
    ensemble: bool = False,
    seed: int | None = None,
    rule_metric: str = "sharpe_excess",
    device: str = "auto",
    agents: list[Agent] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Backtest:
    """Walk ``checkpoints`` (seeds of one setup; with ``folds`` one setup's walk-forward folds) over
    ``split`` beside every benchmark; ``seed`` is the random policy's (default: the run's).
    ``agents`` are the checkpoints already loaded (``load_agents``); ``progress`` is told each
    fold's dates and rule as it is walked."""
    checkpoints = [str(path) for path in checkpoints]
    agents, picked = given_or_loaded(agents, checkpoints, data, overrides, device)
    if folds:
        return _walk_forward(
            checkpoints, agents, split, ensemble, seed, rule_metric, picked, progress
        )
    cfg, market, _ = agents[0]
    check_one_setup(checkpoints, agents, ensemble)
    names = agent_names(len(agents))
    results = walk_agents(names, agents, None, split, picked, ensemble)
    rule = pick_rule(market, cfg, picked, rule_metric)
    conditional = pick_conditional_rule(market, cfg, picked, rule_metric)
    results.update(
        benchmarks(
            market, split, cfg, picked, cfg.seed if seed is None else seed, rule, conditional
        )
    )
    untradable = untradable_line(market, split, cfg.market, cfg.env)
    extra = {
        "best_rule": rule.as_dict(),
        CONDITIONAL: conditional.as_dict(),
        "across_checkpoints": seed_summary(results, names),
        "untradable": untradable,
    }
    return Backtest(
        results,
        cfg,
        _report(split, checkpoints, cfg, results, extra),
        rule,
        conditional,
        untradable,
    )


def _report(
    split: str,
    checkpoints: list[str],
    cfg: Config,
    results: dict[str, WalkResult],
    extra: dict[str, Any],
) -> dict[str, Any]:
    return {
        "split": split,
        "checkpoints": checkpoints,
        "data": cfg.data.source,
        **report_dict(results),
        **extra,
    }


def _walk_forward(
    checkpoints: list[str],
    agents: list[Agent],
    split: str,
    ensemble: bool,
    seed: int | None,
    rule_metric: str,
    device: torch.device,
    progress: Callable[[str], None] | None,
) -> Backtest:
    """Each fold's agents (and their ensemble) and benchmarks over its own split, then every
    policy's folds laid end to end; seed i's walk is the i-th checkpoint of every fold."""
    cfg = agents[0][0]
    for path, (other, _, _) in zip(checkpoints[1:], agents[1:], strict=True):
        if (
            other.data.source != cfg.data.source
            or other.data.symbols != cfg.data.symbols
            or other.agent != cfg.agent
        ):
            raise ConfigError(
                f"--folds: {path} and {checkpoints[0]} are not folds of one setup (another data "
                "source, underlyings or agent); give the folds of one run"
            )
    grouped = group_folds(checkpoints, agents, split)
    if ensemble:  # before any walk: each fold's seeds must make one ensemble
        for fold in grouped:
            check_members([checkpoints[i] for i in fold], [agents[i] for i in fold])
    names = agent_names(len(grouped[0]))
    walks: dict[str, list[WalkResult]] = {}
    per_fold = []
    for fold in grouped:
        paths = [checkpoints[i] for i in fold]
        fold_cfg, fold_data, _ = agents[fold[0]]
        walked = walk_agents(names, [agents[i] for i in fold], None, split, device, ensemble)
        rule = pick_rule(fold_data, fold_cfg, device, rule_metric)  # each fold's own years
        conditional = pick_conditional_rule(fold_data, fold_cfg, device, rule_metric)
        walked |= benchmarks(
            fold_data,
            split,
            fold_cfg,
            device,
            fold_cfg.seed if seed is None else seed,
            rule,
            conditional,
        )
        which = {"checkpoint": paths[0]} if len(paths) == 1 else {"checkpoints": paths}
        per_fold.append(
            {
                **which,
                **report_dict(walked),
                "best_rule": rule.as_dict(),
                CONDITIONAL: conditional.as_dict(),
            }
        )
        for name, result in walked.items():
            walks.setdefault(name, []).append(result)
        start, end = fold_data.split_dates(split)
        if progress is not None:
            progress(
                f"fold {len(per_fold)}: {', '.join(paths)} walk{'s' if len(paths) == 1 else ''} "
                f"{start.date()}..{end.date()}\n  {rule.line(split)}\n  {conditional.line(split)}"
            )
    try:
        results = {name: stitch(fold_walks) for name, fold_walks in walks.items()}
    except ValueError as err:
        raise ConfigError(f"--folds: {err}; give each fold's checkpoint once") from None
    extra = {"folds": per_fold, "across_checkpoints": seed_summary(results, names)}
    return Backtest(results, cfg, _report(split, checkpoints, cfg, results, extra))
