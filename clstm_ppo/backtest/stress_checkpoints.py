"""Stress-test checkpoints from Python: the agents and every benchmark walked over N paths of a
scenario source, returned as the distribution over paths and as the report
``python -m clstm_ppo.evaluate --scenarios ... --json`` writes (docs/SCENARIOS.md, "Stress tests:
evaluate --scenarios").

    from clstm_ppo.backtest.stress_checkpoints import load_stress_source, stress_checkpoints
    done = stress_checkpoints(["runs/a/best_composite.pt"], load_stress_source("fhs"), paths=200)
    done.report["policies"]["agent"]["p_ruin"]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clstm_ppo.backtest.checkpoints import (
    agent_names,
    benchmarks,
    check_one_setup,
    given_or_loaded,
    walk_agents,
)
from clstm_ppo.backtest.ensemble import Agent
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.rules import RulePick, pick_rule
from clstm_ppo.backtest.stress import StressResult, stress_dict, walk_paths
from clstm_ppo.config import ConfigError
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.scenarios.generator import FittedGenerator
from clstm_ppo.scenarios.market import check_fits, sample_market_data
from clstm_ppo.scenarios.sources import fit_baseline, goals_warning, scenario_source


@dataclass
class StressTest:
    """One stress test: every policy's equity over every path, the rule picked on the real
    validation years, the scenario source's goals warning (None when it meets them) and ``report``,
    what --json writes."""

    result: StressResult
    rule: RulePick
    warning: str | None
    report: dict[str, Any]


def load_stress_source(source: str | Path, regime: str | None = None) -> FittedGenerator | str:
    """A scenario generator's checkpoint, loaded and checked to know ``regime``, or a
    baseline's name (fitted on the agent's training years once its data is loaded); anything
    else is one ConfigError."""
    gen = scenario_source(Path(source))
    if isinstance(gen, str):
        if regime is not None:
            raise ConfigError(
                f"--regime {regime!r}: the {gen} baseline has no regimes; drop --regime or pass a "
                "cgan checkpoint"
            )
        return gen
    gen.check_regime(regime)
    return gen


def stress_checkpoints(
    checkpoints: Sequence[str],
    source: FittedGenerator | str | Path,
    *,
    paths: int = 100,
    length: int = 252,
    regime: str | None = None,
    data: str | None = None,
    overrides: Sequence[str] = (),
    ensemble: bool = False,
    seed: int | None = None,
    rule_metric: str = "sharpe_excess",
    device: str = "auto",
    agents: list[Agent] | None = None,
    progress: Callable[[int, int], None] | None = None,
    name: str = "",
) -> StressTest:
    """Walk ``checkpoints`` (seeds of one setup) and every benchmark over ``paths`` paths of
    ``length`` bars from ``source``: a generator's checkpoint or a baseline's name, or what
    ``load_stress_source`` made of one (then ``name`` is how the report names it). A baseline is
    fitted on the first agent's training years, paths are drawn with ``seed`` (default: the run's)
    and best_rule is picked on the real validation years. ``agents`` are the checkpoints already
    loaded (``load_agents``); ``progress(done, total)`` is told as paths are walked."""
    if not isinstance(source, FittedGenerator):
        source, name = load_stress_source(source, regime), name or str(source)
    checkpoints = [str(path) for path in checkpoints]
    agents, picked = given_or_loaded(agents, checkpoints, data, overrides, device)
    check_one_setup(checkpoints, agents, ensemble)
    cfg, real, _ = agents[0]
    if isinstance(source, str):  # a baseline, fitted on the agent's own training years
        source = fit_baseline(source, real, cfg.data)
        label = f"the {source.kind} baseline"
    else:
        label = f"{source.kind} ({name})" if name else source.kind
    check_fits(source, real, f"--scenarios {name or source.kind}")
    warning = goals_warning(source, label)
    seed = cfg.seed if seed is None else seed
    markets = sample_market_data(
        source,
        paths,
        length,
        regime,
        seed,
        data_config=cfg.data,
        normalizer=real.normalizer,
        market=cfg.market,
    )
    rule = pick_rule(real, cfg, picked, rule_metric)
    names = agent_names(len(agents))

    def walk_all(market: MarketData) -> dict[str, WalkResult]:
        return walk_agents(names, agents, market, "test", picked, ensemble) | benchmarks(
            market, "test", cfg, picked, seed, rule
        )

    result = walk_paths(
        markets, walk_all, cfg.env.initial_cash, cfg.env.ruin_fraction, regime, label, progress
    )
    report = {
        "checkpoints": checkpoints,
        "seed": seed,
        **stress_dict(result),
        "goals_warning": warning,
        "best_rule": rule.as_dict(),
    }
    return StressTest(result, rule, warning, report)
