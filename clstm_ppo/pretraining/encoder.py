"""LSTM 1 + MLP pretrained before the first update (``pretrain.enabled``), on every rank,
then made identical.

Supervised (next-bar returns, ``pretraining/supervised.py``) or meta-learned (MAML or prototypical
networks over 3-way few-shot tasks, ``pretraining/meta_learned.py``, loaded only when asked). Rank 0
reports how it went.
"""

from __future__ import annotations

import torch

from clstm_ppo.agent import ActorCritic
from clstm_ppo.config import Config
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.windows import MarketWindows
from clstm_ppo.distributed import DistContext
from clstm_ppo.pretraining.supervised import pretrain_encoder


def pretrain(
    model: ActorCritic, windows: MarketWindows, data: MarketData, cfg: Config, ctx: DistContext
) -> tuple[str | None, list[dict] | None]:
    """Pretrain ``model``'s encoder by ``cfg.pretrain.method``; every rank ends with rank
    0's weights. Returns what the run's log gets: a line (few-shot methods) or the
    supervised losses by epoch."""
    method = cfg.pretrain.method
    if method != "supervised":
        from clstm_ppo.pretraining.meta_learned import meta_pretrain_encoder

        history = meta_pretrain_encoder(model.encoder, data, cfg, method, cfg.seed)
        ctx.broadcast_parameters(model)
        losses = ", ".join(f"epoch {h['epoch']} query loss {h['query_loss']:.4f}" for h in history)
        return (
            (
                f"pretraining LSTM 1 + MLP by {method} (3-way few-shot tasks): {losses} "
                "(chance: ln 3 = 1.0986)"
            ),
            None,
        )
    history = pretrain_encoder(
        model.encoder, windows, data, cfg.pretrain, torch.Generator().manual_seed(cfg.seed)
    )
    ctx.broadcast_parameters(model)  # GPU kernels need not be bitwise deterministic across ranks
    return None, history
