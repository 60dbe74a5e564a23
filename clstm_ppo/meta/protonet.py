"""Prototypical networks (Snell et al. 2017) on the MarketEncoder's codes: a class's prototype is
the mean code of its support bars, and a query bar goes to the nearest prototype in squared
Euclidean distance."""

from __future__ import annotations

import torch
from torch import Tensor, nn

MISSING = -1e9  # the logit of a class with no support bar: never predicted


def prototypes(codes: Tensor, y: Tensor, n_classes: int = 3) -> tuple[Tensor, Tensor]:
    """Class means of ``codes`` (E, Ns, D) by labels ``y`` (E, Ns): (E, C, D), and which
    classes had bars (E, C)."""
    onehot = nn.functional.one_hot(y, n_classes).to(codes.dtype)  # (E, Ns, C)
    counts = onehot.sum(1)  # (E, C)
    means = onehot.transpose(1, 2) @ codes / counts.clamp(min=1).unsqueeze(-1)
    return means, counts > 0


def proto_logits(encoder: nn.Module, xs: Tensor, ys: Tensor, xq: Tensor) -> Tensor:
    """Query logits (E, Nq, C): minus the squared distance of each query code to each prototype."""
    e, ns, nq = xs.shape[0], xs.shape[1], xq.shape[1]
    codes = encoder(torch.cat([xs.flatten(0, 1), xq.flatten(0, 1)]))  # one batched encoder call
    support, query = codes[: e * ns].view(e, ns, -1), codes[e * ns :].view(e, nq, -1)
    protos, present = prototypes(support, ys)
    dist = ((query.unsqueeze(2) - protos.unsqueeze(1)) ** 2).sum(-1)
    return (-dist).masked_fill(~present.unsqueeze(1), MISSING)


def proto_step(
    encoder: nn.Module,
    optimizer: torch.optim.Optimizer,
    xs: Tensor,
    ys: Tensor,
    xq: Tensor,
    yq: Tensor,
) -> float:
    """One episodic training step: cross-entropy of the query bars against the
    support's prototypes."""
    out = proto_logits(encoder, xs, ys, xq)
    value = nn.functional.cross_entropy(out.flatten(0, 1), yq.flatten())
    optimizer.zero_grad(set_to_none=True)
    value.backward()
    optimizer.step()
    return float(value.detach())
