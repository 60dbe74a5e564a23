"""``--pretraining`` with ``pretrain.method maml|protonet``: meta-learn the agent's encoder (LSTM 1
+ MLP) on few-shot BUY/HOLD/SELL tasks over every training underlying's training split, instead of
next-bar regression."""

from __future__ import annotations

import numpy as np
import torch

from clstm_ppo.agent.model import MarketEncoder
from clstm_ppo.config import Config, ConfigError
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.meta.maml import MamlConfig, meta_step
from clstm_ppo.meta.net import FewShotNet
from clstm_ppo.meta.protonet import proto_step
from clstm_ppo.meta.tasks import FewShotData, sample_episodes

ITERATIONS_PER_EPOCH = 50  # meta-iterations of META_BATCH tasks per pretrain.epochs
META_BATCH = 16


def meta_pretrain_encoder(
    encoder: torch.nn.Module, data: MarketData, cfg: Config, method: str, seed: int
) -> list[dict[str, float]]:
    """Train ``encoder`` in place by ``method`` (maml or protonet); one record per epoch:
    the mean query loss."""
    if not isinstance(encoder, MarketEncoder):
        raise ConfigError(
            f"pretrain.method {method} meta-learns LSTM 1 + MLP, which agent.kind "
            f"{cfg.agent.kind} has not; use agent.kind clstm or pretrain.method supervised"
        )
    device = next(encoder.parameters()).device
    symbols = list(range(len(data.symbols)))
    # statistics of every underlying's training bars: the run's own
    fs = FewShotData(data, symbols, horizon=5)
    net = FewShotNet(len(data.feature_names), cfg.agent).to(device)
    # the agent's own module: what the meta-learning changes is what the agent starts from
    net.encoder = encoder
    params = encoder.parameters() if method == "protonet" else net.parameters()
    optimizer = torch.optim.Adam(params, lr=cfg.pretrain.lr)
    rng = np.random.default_rng(seed)
    history = []
    for epoch in range(cfg.pretrain.epochs):
        losses = []
        for _ in range(ITERATIONS_PER_EPOCH):
            ep = sample_episodes(fs, symbols, fs.region("train"), META_BATCH, 5, 15, rng)
            batch = [
                t.to(device)
                for t in (
                    fs.gather(ep.support_rows),
                    ep.support_y,
                    fs.gather(ep.query_rows),
                    ep.query_y,
                )
            ]
            if method == "maml":
                losses.append(meta_step(net, optimizer, *batch, MamlConfig()))
            else:
                losses.append(proto_step(encoder, optimizer, *batch))
        history.append(
            {
                "epoch": epoch + 1,
                "query_loss": float(np.mean(losses)),
                "chance_loss": float(np.log(3)),
            }
        )
    return history
