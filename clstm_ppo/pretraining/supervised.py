"""--pretraining: fit LSTM 1 + MLP with a head that predicts the next bar's return on
the training split."""

from __future__ import annotations

import torch
from torch import nn

from clstm_ppo.agent.model import MarketEncoder
from clstm_ppo.config import PretrainConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.windows import MarketWindows


def pretrain_encoder(
    encoder: MarketEncoder,
    windows: MarketWindows,
    data: MarketData,
    cfg: PretrainConfig,
    generator: torch.Generator,
) -> list[dict[str, float]]:
    """Train ``encoder`` in place; returns one record per epoch: train MSE and the predict-zero MSE.

    Targets are the normalised log return of bar t+1; windows end at bar t, both
    inside the training split.
    """
    device = next(encoder.parameters()).device
    start, end = data.splits["train"]
    ret = data.feature_names.index("log_return")
    bars = torch.arange(start + data.window - 1, end - 1, device=device)
    rows = torch.cat([s * windows.n_bars + bars for s in range(windows.n_symbols)])
    targets = windows.feature_rows[rows + 1, ret]
    head = nn.Linear(encoder.code_width, 1).to(device)
    params = list(encoder.parameters()) + list(head.parameters())
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    baseline = float((targets**2).mean())  # MSE of always predicting 0 (the training-split mean)
    history = []
    for epoch in range(cfg.epochs):
        order = torch.randperm(len(rows), generator=generator).to(device)
        # summed on the device: one host sync per epoch, not per batch
        total = torch.zeros((), device=device)
        for batch in order.split(cfg.batch_size):
            prediction = head(encoder(windows.gather(rows[batch]))).squeeze(-1)
            loss = ((prediction - targets[batch]) ** 2).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            total += loss.detach() * len(batch)
        history.append(
            {"epoch": epoch + 1, "mse": float(total) / len(rows), "predict_zero_mse": baseline}
        )
    return history
