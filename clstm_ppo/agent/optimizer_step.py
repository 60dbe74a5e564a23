"""The optimizer step (gradient clipping, then Adam) replayed as one CUDA graph (SPEC section 13).

Eager, a clipped Adam step on CUDA is some twenty kernel launches from Python over the parameter lists (the norms,
the clip, Adam's two moments, its bias corrections and the update). Captured, it is one replay. Capture needs:

- Adam's state on the device (``capturable=True``: its step counts are device tensors, the bias corrections are
  computed there) and the learning rate as a device tensor that ``set_lr`` fills before a replay (a Python float
  would be baked into the graph);
- the gradients at fixed addresses: they are made (zeros) before the first backward and ``zero_grad`` keeps them
  (``set_to_none=False``), so each backward accumulates into the tensors the graph reads (a backward that found no
  gradient would hand its own output over as one: under a compiled loss's CUDA graphs, memory its next replay
  overwrites);
- Adam's state made before capture: the first call steps eagerly (Adam creates its moments), the second captures
  and replays, every later call replays. Loading an optimizer state afterwards gives Adam new tensors, which the
  graph does not read: load it first, then make the ``OptimizerStep``.

Off CUDA (or with ``capture`` off) every call is the eager step, so the CPU runs all of this but the capture. fp16's
loss scaler checks gradients on the host and is not captured (``Precision.step`` stays its step). Only
``scripts/bench_update.py`` uses the captured step so far (its "captured" path), not the trainer: untried on a GPU.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from clstm_ppo.config import PPOConfig


def make_adam(params: Iterable[nn.Parameter], lr: float, cfg: PPOConfig, capture_on: torch.device | None = None
              ) -> torch.optim.Adam:
    """The update's Adam (``cfg``'s betas and eps); with ``capture_on`` a CUDA device, with its state there and a
    tensor learning rate, as a captured step needs."""
    betas, eps = (cfg.adam_betas[0], cfg.adam_betas[1]), cfg.adam_eps
    if capture_on is not None and capture_on.type == "cuda":
        return torch.optim.Adam(params, lr=torch.tensor(lr, device=capture_on), betas=betas, eps=eps,
                                capturable=True, foreach=True)
    return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)


def clipped_step(params: list[nn.Parameter], optimizer: torch.optim.Optimizer, max_grad_norm: float) -> Tensor:
    """Clip the gradients' global norm, then step; a device bool, False when the gradients were not finite (read by
    the caller once the update is over: nothing here waits for the device)."""
    norm = nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()  # a non-finite norm makes the weights NaN too: the caller stops without saving them
    return torch.isfinite(norm)


class OptimizerStep:
    """Clip the gradients' global norm to ``max_grad_norm``, then step ``optimizer``; a call returns a device bool,
    False when the gradients were not finite (the caller reads it once the update is over). With ``capture`` and an
    optimizer from ``make_adam(..., capture_on=device)`` on CUDA, the step is replayed as one CUDA graph."""

    def __init__(self, params: Iterable[nn.Parameter], optimizer: torch.optim.Optimizer, max_grad_norm: float,
                 capture: bool):
        self.params, self.optimizer, self.max_grad_norm = list(params), optimizer, max_grad_norm
        group = optimizer.param_groups[0]
        self.capture = capture and self.params[0].device.type == "cuda"
        if self.capture and not (group.get("capturable") and isinstance(group["lr"], Tensor)):
            raise ValueError("a captured optimizer step needs Adam with capturable=True and a tensor learning rate "
                             "(make it with optimizer_step.make_adam(..., capture_on=device))")
        if self.capture:
            for param in self.params:
                if param.requires_grad and param.grad is None:
                    param.grad = torch.zeros_like(param)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.finite: Tensor | None = None  # the graph's output: overwritten in place by each replay

    def set_lr(self, lr: float) -> None:
        """The learning rate of the next steps: filled into the tensor a graph reads, or set as a float."""
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    def zero_grad(self) -> None:
        # Captured, the graph reads these very tensors: zero them in place instead of letting backward make new ones.
        self.optimizer.zero_grad(set_to_none=not self.capture)

    def __call__(self) -> Tensor:
        if not self.capture:
            return clipped_step(self.params, self.optimizer, self.max_grad_norm)
        if self.graph is None:
            if not self.optimizer.state:  # Adam makes its moments at its first step: that step runs eagerly
                return clipped_step(self.params, self.optimizer, self.max_grad_norm)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):  # records the step without running it ...
                self.finite = clipped_step(self.params, self.optimizer, self.max_grad_norm)
        self.graph.replay()  # ... so the capturing call replays it too
        assert self.finite is not None
        return self.finite.clone()  # the next replay overwrites the graph's output
