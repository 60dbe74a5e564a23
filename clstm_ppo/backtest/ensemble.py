"""evaluate --ensemble: which checkpoints may act as one policy, which are one walk-forward fold's
seeds, and the ensemble's walk (docs/BACKTEST.md, "Ensembles")."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from clstm_ppo.agent.model import ActorCritic
from clstm_ppo.backtest.policies import ensemble_policy
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.scaled_rules import scaled_rule
from clstm_ppo.backtest.walk import walk
from clstm_ppo.config import Config, ConfigError, walk_rules
from clstm_ppo.data.dataset import SPLITS, MarketData

ENSEMBLE = "ensemble"
Agent = tuple[Config, MarketData, ActorCritic]  # what agent.loading.load_agent returns

WALK_SECTIONS = ("data", "market", "env")
# Settings only training reads: a walk has no episodes, rewards or generated paths, and runs its own
# float64 eager env (walk.walk_env), so members may differ in these and still see the same walk.
TRAINING_ONLY = frozenset(
    {
        "data.augment",
        "data.augment_checkpoint",
        "data.augment_paths",
        "env.episode_length",
        "env.reward_scale",
        "env.reward",
        "env.drawdown_penalty",
        "env.turbulence_penalty",
        "env.dtype",
        "env.stagger_starts",
    }
)


def walk_settings(cfg: Config) -> dict[str, Any]:
    """Every setting (dotted key -> value) that decides the bars a walk sees, its actions
    and how they fill."""
    keys = [
        key
        for key, _, _ in walk_rules(Config)
        if key.partition(".")[0] in WALK_SECTIONS and key not in TRAINING_ONLY
    ]
    return {key: functools.reduce(getattr, key.split("."), cfg) for key in keys}


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value)


def check_members(paths: list[str], agents: list[Agent]) -> None:
    """Refuse, in one line, checkpoints that cannot act as one policy on one walk: another setting
    of the walk (data and its split dates, the chain and costs, the account) or features normalised
    with other statistics."""
    first, (cfg, data, _) = paths[0], agents[0]
    ours = walk_settings(cfg)
    fix = (
        "ensemble the seeds of one setup (with --folds, each fold's), or walk "
        "these without --ensemble"
    )
    for path, (other_cfg, other_data, _) in zip(paths[1:], agents[1:], strict=True):
        theirs = walk_settings(other_cfg)
        key = next((k for k in ours if theirs[k] != ours[k]), None)
        if key is not None:
            raise ConfigError(
                f"--ensemble: {path} has {key}={_shown(theirs[key])} where {first} has "
                f"{_shown(ours[key])}; {fix}"
            )
        a, b = data.normalizer, other_data.normalizer
        if a.names != b.names or not (
            np.array_equal(a.mean, b.mean) and np.array_equal(a.std, b.std)
        ):
            raise ConfigError(
                f"--ensemble: {path} and {first} normalise their features with other statistics "
                f"(trained on other bars of {cfg.data.source}); {fix}"
            )


def group_folds(paths: list[str], agents: list[Agent], split: str) -> list[list[int]]:
    """Indices of each walk-forward fold's checkpoints, folds in the order of ``split``'s first
    date, each fold's in the order given. Checkpoints whose three splits span the same dates (their
    data.train_end, val_end and test_end, as resolved over the data) are seeds of one fold; every
    fold must hold as many."""
    twice = next((path for i, path in enumerate(paths) if path in paths[:i]), None)
    if twice is not None:
        raise ConfigError(f"--folds: {twice} is given twice; give each checkpoint once")
    folds: dict[tuple, list[int]] = {}
    for i, (_, data, _) in enumerate(agents):
        folds.setdefault(tuple(data.split_dates(name) for name in SPLITS), []).append(i)
    order = sorted(folds.values(), key=lambda fold: agents[fold[0]][1].split_dates(split)[0])
    if len(order) == 1 and len(paths) > 1:
        raise ConfigError(
            f"--folds: all {len(paths)} checkpoints have the same split dates, so they are seeds "
            "of one run, not folds; drop --folds"
        )
    for fold in order[1:]:
        if len(fold) != len(order[0]):
            raise ConfigError(
                f"--folds: {paths[order[0][0]]}'s fold has {len(order[0])} checkpoint(s), "
                f"{paths[fold[0]]}'s {len(fold)}; give every fold the same seeds"
            )
    return order


def walk_ensemble(
    models: list[ActorCritic], data: MarketData, split: str, cfg: Config, device: torch.device
) -> WalkResult:
    """The ensemble's one walk over ``split``: every underlying at once, each member
    called once a bar."""
    policy, state = ensemble_policy(models, len(data.symbols), device)
    return walk(ENSEMBLE, policy, state, data, split, cfg, device, scaled_rule(cfg, data, device))
