"""Adapt a trained agent to a new underlying from Python: K env steps of PPO continuing its
checkpoint on the new data's training split, then the adapted agent, the checkpoint zero-shot, a
fresh agent trained for the same K and buy-and-hold walked over one split of the new data
(docs/ADAPTATION.md).

    from clstm_ppo.training.adaptation import adapt_checkpoint
    done = adapt_checkpoint("runs/a/best_composite.pt", "new_stock.csv", 50_000, part="encoder")
    done.report["summary"]["adapted"]["sharpe"]

Adaptation continues the checkpoint through the trainer (training/runner.py) with the checkpoint's
settings, its normalisation statistics and its optimizer state: K env steps, the learning rate
decaying over them, validation walks and best_*.pt as in training. ``part="encoder"`` trains LSTM 1
+ MLP alone. The zero-shot row is exactly ``evaluate`` of the checkpoint on the same data and split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clstm_ppo.agent.from_checkpoint import checkpoint_config, load_agent
from clstm_ppo.agent.model import ActorCritic
from clstm_ppo.agent.optimizer_step import make_adam
from clstm_ppo.backtest.policies import agent_policy
from clstm_ppo.backtest.report import underlying_metrics
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.scaled_rules import scaled_rule
from clstm_ppo.backtest.walk import buy_and_hold, walk
from clstm_ppo.config import Config, ConfigError
from clstm_ppo.data.errors import DataError
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.device import configure_backends, pick_device
from clstm_ppo.env import PORTFOLIO_FEATURES
from clstm_ppo.env.scaled import agent_choices
from clstm_ppo.market.observed import observed_feature_names, observed_market_data
from clstm_ppo.run_files.checkpoint import has_run
from clstm_ppo.run_files.run_state import RunState, load_checkpoint
from clstm_ppo.training.selection import Selection

ROWS = ("adapted", "zero_shot", "scratch", "buy_and_hold")


def check_feature_set(state: RunState, path: str, source: str, cfg: Config) -> None:
    """The checkpoint's encoder reads the features it was normalised on; another set is
    refused in one line."""
    saved, observed = (
        tuple(state.normalizer["names"]),
        observed_feature_names(cfg.data.option_features),
    )
    if saved != observed:
        raise DataError(
            f"{path} was trained on features {list(saved)}; '{source}' gives {list(observed)}: "
            "adapt a checkpoint of this version's feature set, or retrain"
        )


def start_state(
    state: RunState, model: dict[str, Any], optimizer: dict[str, Any], num_envs: int
) -> RunState:
    """What the trainer's resume path reads to begin a new run from given weights: the checkpoint's
    normalisation, update 0, no env state (the copies start fresh on the new data) and fresh
    checkpoint selection."""
    return RunState(
        model=model,
        optimizer=optimizer,
        scaler=None,
        update=0,
        global_step=0,
        episodes=0,
        config=state.config,
        normalizer=state.normalizer,
        world_size=1,
        num_envs=num_envs,
        **Selection().state_dict(),
    )


def fresh_start(cfg: Config, state: RunState) -> RunState:
    """A new agent of the checkpoint's settings, initialised as the trainer would,
    and a fresh Adam."""
    torch.manual_seed(cfg.seed)
    model = ActorCritic(
        len(observed_feature_names(cfg.data.option_features)),
        len(PORTFOLIO_FEATURES),
        agent_choices(cfg.agent, cfg.market),
        cfg.agent,
    )
    optimizer = make_adam(model.parameters(), cfg.ppo.learning_rate, cfg.ppo)
    return start_state(state, model.state_dict(), optimizer.state_dict(), cfg.train.num_envs)


def train_from_start(
    cfg: Config, run_dir: Path, device: torch.device, start: RunState, part: str
) -> Path:
    """K env steps of PPO from ``start`` into ``run_dir`` through the trainer;
    returns its latest.pt."""
    from clstm_ppo.training.runner import Trainer  # imported late: argument errors stay fast

    trainer = Trainer(cfg, run_dir, device, resume=start)
    if part == "encoder":  # the rest keeps its weights: no gradient, so Adam skips it
        for name, param in trainer.model.named_parameters():
            param.requires_grad_(name.startswith("encoder."))
    trainer.run()
    return run_dir / "latest.pt"


def summary(result: WalkResult) -> dict[str, float]:
    rows = [underlying_metrics(result, s) for s in range(len(result.symbols))]
    return {
        key: float(np.mean([r[key] for r in rows]))
        for key in ("sharpe", "total_return", "max_drawdown")
    }


@dataclass
class Adaptation:
    """One adaptation: each row's walk (adapted, zero_shot, scratch unless skipped, buy_and_hold),
    the checkpoint each agent row walked, and ``report``, what ``clstm-ppo-adapt --json`` writes."""

    results: dict[str, WalkResult]
    checkpoints: dict[str, Path]
    report: dict[str, Any]


def default_out(cfg: Config, checkpoint: str, data: str, steps: int) -> Path:
    """checkpoints/adapt-<checkpoint's run>-<data's stem>-<K>: one folder per
    adaptation asked for."""
    stem = Path(data).name.split(".")[0]
    return Path(cfg.output.checkpoint_dir) / f"adapt-{Path(checkpoint).parent.name}-{stem}-{steps}"


def adapt_checkpoint(
    checkpoint: str | Path,
    data: str,
    steps: int,
    *,
    part: str = "all",
    split: str = "test",
    overrides: Sequence[str] = (),
    seed: int | None = None,
    out: Path | None = None,
    scratch: bool = True,
    device: str = "auto",
) -> Adaptation:
    """Adapt ``checkpoint`` to ``data`` with ``steps`` env steps of PPO (``part``: all, or the
    encoder alone) into ``out`` (adapted/, scratch/), then walk every row over ``split``. Another
    feature set, bad data or an ``out`` already holding a run is one ConfigError or DataError
    before any training."""
    checkpoint = str(checkpoint)
    if steps < 1:
        raise ConfigError(f"--steps {steps} must be at least 1")
    if part not in ("all", "encoder"):
        raise ConfigError(f"part {part!r}: adapt all of the agent or its encoder")
    state = load_checkpoint(checkpoint)
    cfg = checkpoint_config(state, checkpoint, data, list(overrides))
    check_feature_set(state, checkpoint, data, cfg)
    observed_market_data(cfg, Normalizer.from_state_dict(state.normalizer))  # bad data: one line
    out = out or default_out(cfg, checkpoint, data, steps)
    for sub in ("adapted", "scratch"):
        if has_run(out / sub):
            raise ConfigError(f"{out / sub} already holds a run; pick another --out")
    picked = pick_device(device)
    configure_backends(picked)
    cfg.train.total_steps, cfg.train.num_episodes, cfg.pretrain.enabled = steps, 0, False
    cfg.launch.device, cfg.launch.compile_encoder = picked.type, False
    if seed is not None:
        cfg.seed = seed
    runs = {
        "adapted": train_from_start(
            cfg,
            out / "adapted",
            picked,
            start_state(state, state.model, state.optimizer, cfg.train.num_envs),
            part,
        )
    }
    if scratch:
        runs["scratch"] = train_from_start(
            cfg, out / "scratch", picked, fresh_start(cfg, state), "all"
        )
    runs["zero_shot"] = Path(checkpoint)
    results: dict[str, WalkResult] = {}
    walked = None
    for name in ROWS:
        if name not in runs:
            continue
        # zero-shot reads the checkpoint exactly as evaluate does; the new runs
        # carry data and overrides already
        agent_cfg, agent_data, model = (
            load_agent(checkpoint, data, list(overrides), picked)
            if name == "zero_shot"
            else load_agent(str(runs[name]), None, [], picked)
        )
        policy, carried = agent_policy(model, len(agent_data.symbols), picked)
        results[name] = walk(
            name,
            policy,
            carried,
            agent_data,
            split,
            agent_cfg,
            picked,
            scaled_rule(agent_cfg, agent_data, picked),
        )
        walked = walked or (agent_data, agent_cfg)
    results["buy_and_hold"] = buy_and_hold(walked[0], split, walked[1])
    report = {
        name: {sym: underlying_metrics(res, s) for s, sym in enumerate(res.symbols)}
        for name, res in results.items()
    }
    report |= {
        "summary": {name: summary(res) for name, res in results.items()},
        "steps": steps,
        "part": part,
        "split": split,
        "checkpoints": {k: str(v) for k, v in runs.items()},
    }
    return Adaptation(results, runs, report)
