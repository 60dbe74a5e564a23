"""Baselines: an encoder + head pretrained on every meta-training underlying pooled (then
fine-tuned, or used as it is: no adaptation), training from scratch on the support set alone, and
the majority class."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn


def pooled_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    xs: Tensor,
    ys: Tensor,
    xq: Tensor,
    yq: Tensor,
) -> float:
    """Plain supervised learning on the training tasks' bars, support and query pooled (each
    labelled with its own task's band): what the encoder learns without any episodic structure."""
    x = torch.cat([xs.flatten(0, 1), xq.flatten(0, 1)])
    y = torch.cat([ys.flatten(), yq.flatten()])
    value = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    value.backward()
    optimizer.step()
    return float(value.detach())


def majority_class(query_labels: list[np.ndarray]) -> int:
    """The most frequent query class over the meta-training tasks seen: a constant guess."""
    counts = np.bincount(np.concatenate([q.ravel() for q in query_labels]), minlength=3)
    return int(counts.argmax())
