"""A trained agent from its checkpoint: its settings, the market data it observes and its model, for
backtests, predictions and adaptation (docs/BACKTEST.md). Settings given on top of a checkpoint's
are refused where the model could not read what they make.
"""

from __future__ import annotations

import json

import torch

from clstm_ppo.agent.model import ActorCritic
from clstm_ppo.config import Config, ConfigError, first_line, load_config
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.env import PORTFOLIO_FEATURES, ActionSpace
from clstm_ppo.env.scaled import agent_choices
from clstm_ppo.market.observed import observed_market_data
from clstm_ppo.run_files.checkpoint import CheckpointError
from clstm_ppo.run_files.run_folder import without_saved_outputs
from clstm_ppo.run_files.run_state import RunState, load_checkpoint


def model_from_checkpoint(
    state: RunState, data: MarketData, cfg: Config, device: torch.device
) -> ActorCritic:
    """The checkpoint's agent, of its ``cfg.agent.kind`` (``checkpoint_config`` reads an
    older one's as clstm)."""
    model = ActorCritic(
        len(data.feature_names),
        len(PORTFOLIO_FEATURES),
        agent_choices(cfg.agent, cfg.market),
        cfg.agent,
    ).to(device)
    try:
        model.load_state_dict(state.model)
    except RuntimeError as err:
        raise CheckpointError(
            f"the checkpoint's model does not fit this version's agent ({first_line(err, 100)}); "
            "it was written before the actions or the observed portfolio changed: retrain"
        ) from None
    return model


def checkpoint_config(
    state: RunState, path: str, data_source: str | None, overrides: list[str]
) -> Config:
    """The checkpoint's own settings, then ``--data`` and ``--set``; refused where the model
    could not read what they make (another window or action space) or would be another model
    (agent kind or sizes)."""
    # a deep copy; outputs: this command's
    base = without_saved_outputs(json.loads(json.dumps(state.config)))
    # Written before agent.kind existed: the cascaded LSTM, whatever the default kind becomes.
    base.setdefault("agent", {}).setdefault("kind", "clstm")
    saved = load_config(None, [], base=json.loads(json.dumps(base)))
    if data_source is not None:
        # another source: its own dates decide the splits, unless --set says
        base["data"].update(
            source=data_source, symbols=None, train_end=None, val_end=None, test_end=None
        )
    cfg = load_config(None, overrides, base=base)
    if cfg.data.window != saved.data.window:
        raise ConfigError(
            f"{path} was trained on {saved.data.window}-bar windows, not {cfg.data.window}; "
            "evaluate it with its own data.window"
        )
    if ActionSpace.from_config(cfg.market) != ActionSpace.from_config(saved.market):
        raise ConfigError(
            f"{path} was trained on the chain {saved.market.moneyness} x "
            f"{saved.market.expiries_days} days; keep market.moneyness and "
            "market.expiries_days as they were"
        )
    if cfg.agent != saved.agent:
        raise ConfigError(
            f"{path}: agent sizes come from the checkpoint, as does agent.kind; drop the --set "
            "agent.* overrides"
        )
    return cfg


def load_agent(
    path: str, data_source: str | None, overrides: list[str], device: torch.device
) -> tuple[Config, MarketData, ActorCritic]:
    """A checkpoint's settings (then ``data_source`` and ``overrides``), the market data it
    observes (normalised with its own training statistics) and its model in eval mode on
    ``device``: what evaluate, predict, adapt and the studies walk. ``data_source`` None keeps the
    checkpoint's data."""
    state = load_checkpoint(path)
    cfg = checkpoint_config(state, path, data_source, overrides)
    data = observed_market_data(cfg, Normalizer.from_state_dict(state.normalizer))
    model = model_from_checkpoint(state, data, cfg, device)
    model.eval()
    return cfg, data, model
