"""The few-shot classifier: our MarketEncoder (LSTM 1 + MLP) and a linear 3-way head, and
its functional form."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.func import functional_call

from clstm_ppo.agent.model import MarketEncoder
from clstm_ppo.config import AgentConfig

Params = dict[str, Tensor]


class FewShotNet(nn.Module):
    """(B, TW, F) windows -> (B, 3) logits; ``encoder`` alone gives the codes prototypical
    networks compare."""

    def __init__(self, n_features: int, cfg: AgentConfig, n_classes: int = 3):
        super().__init__()
        self.encoder = MarketEncoder(n_features, cfg)
        self.head = nn.Linear(cfg.mlp_hidden, n_classes)

    def forward(self, windows: Tensor) -> Tensor:
        return self.head(self.encoder.mlp(unrolled_lstm(self.encoder.lstm, windows)))


def unrolled_lstm(lstm: nn.LSTM, x: Tensor) -> Tensor:
    """The last hidden state of one-layer ``lstm`` over (B, TW, F), step by step in plain
    tensor ops: the same numbers as the fused kernel (tests), but every op has a vmap batching
    rule and a double backward, which MAML's per-task inner loops need (the fused CPU kernel
    has neither under vmap)."""
    w_ih, w_hh = lstm.weight_ih_l0, lstm.weight_hh_l0
    # the input projection of every step at once
    xi = x @ w_ih.T + (lstm.bias_ih_l0 + lstm.bias_hh_l0)
    h = x.new_zeros(*x.shape[:-2], w_hh.shape[1])
    c = h
    for t in range(x.shape[-2]):
        i, f, g, o = (xi[..., t, :] + h @ w_hh.T).chunk(4, -1)  # PyTorch's gate order
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    return h


def params_of(model: nn.Module) -> Params:
    """The model's parameters as a dict of detached tensors, the starting point of
    a functional pass."""
    return {name: p.detach() for name, p in model.named_parameters()}


def logits(model: nn.Module, params: Params, x: Tensor) -> Tensor:
    return functional_call(model, params, (x,))


def loss(model: nn.Module, params: Params, x: Tensor, y: Tensor) -> Tensor:
    return nn.functional.cross_entropy(logits(model, params, x), y)


@contextmanager
def quiet_vmap() -> Iterator[None]:
    """Silences vmap's per-call note on ops it runs by its slow fallback, should any be met."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*batching rule.*")
        yield


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
