"""MAML (Finn et al. 2017) through ``torch.func``: the inner loop is plain SGD on a dict of
parameters, so the meta-gradient of the query loss differentiates through it (second order) unless
``first_order`` cuts the inner gradients out of the graph (FOMAML). Tasks of a meta-batch run
under one ``vmap``."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import grad, grad_and_value, vmap

from clstm_ppo.meta.net import Params, logits, loss, params_of, quiet_vmap


@dataclass(frozen=True)
class MamlConfig:
    """The documents' settings: 5 inner SGD steps at 1e-2, Adam at 1e-3 for the meta step."""

    inner_steps: int = 5
    inner_lr: float = 1e-2
    meta_lr: float = 1e-3
    first_order: bool = False


def inner_adapt(
    model: nn.Module,
    params: Params,
    x: Tensor,
    y: Tensor,
    steps: int,
    lr: float,
    first_order: bool = False,
) -> Params:
    """``steps`` SGD steps on the support set (x, y): p <- p - lr * dL/dp, functionally (no
    module is changed)."""
    for _ in range(steps):
        g = grad(lambda p: loss(model, p, x, y))(params)
        if first_order:  # FOMAML: the inner gradients are constants to the meta-gradient
            g = {k: v.detach() for k, v in g.items()}
        params = {k: params[k] - lr * g[k] for k in params}
    return params


def query_loss(
    model: nn.Module,
    params: Params,
    xs: Tensor,
    ys: Tensor,
    xq: Tensor,
    yq: Tensor,
    steps: int,
    lr: float,
    first_order: bool = False,
) -> Tensor:
    """One task's meta-objective: the query loss after adapting on its support set."""
    return loss(model, inner_adapt(model, params, xs, ys, steps, lr, first_order), xq, yq)


def meta_gradient(
    model: nn.Module,
    params: Params,
    xs: Tensor,
    ys: Tensor,
    xq: Tensor,
    yq: Tensor,
    cfg: MamlConfig,
) -> tuple[Params, Tensor]:
    """Mean meta-gradient and mean query loss over a batch of tasks (xs: (E, Ns, TW, F),
    ys: (E, Ns), ...)."""

    def one(p: Params, a: Tensor, b: Tensor, c: Tensor, d: Tensor) -> Tensor:
        return query_loss(model, p, a, b, c, d, cfg.inner_steps, cfg.inner_lr, cfg.first_order)

    with quiet_vmap():
        grads, losses = vmap(grad_and_value(one), in_dims=(None, 0, 0, 0, 0))(
            params, xs, ys, xq, yq
        )
    return {k: g.mean(0) for k, g in grads.items()}, losses.mean()


def meta_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    xs: Tensor,
    ys: Tensor,
    xq: Tensor,
    yq: Tensor,
    cfg: MamlConfig,
) -> float:
    """One meta-iteration: the meta-gradient into ``.grad``, then the outer optimizer's step."""
    grads, value = meta_gradient(model, params_of(model), xs, ys, xq, yq, cfg)
    for name, p in model.named_parameters():
        p.grad = grads[name]
    optimizer.step()
    return float(value)


def adapt_predictions(
    model: nn.Module,
    params: Params,
    xs: Tensor,
    ys: Tensor,
    xq: Tensor,
    steps: list[int],
    lr: float,
    chunk: int = 64,
) -> dict[int, Tensor]:
    """Query predictions (E, Nq) after each number of SGD steps in ``steps`` on each task's support
    set, from ``params``: the evaluation of MAML, fine-tuning and training from scratch alike (0
    steps: no adaptation)."""

    def trajectory(p: Params, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
        out, done = [], 0
        for target in sorted(steps):
            p = inner_adapt(model, p, a, b, target - done, lr, first_order=True)
            done = target
            out.append(logits(model, p, c).argmax(-1))
        return torch.stack(out)

    parts = []
    with quiet_vmap():
        for lo in range(0, len(xs), chunk):
            sl = slice(lo, lo + chunk)
            parts.append(
                vmap(trajectory, in_dims=(None, 0, 0, 0))(params, xs[sl], ys[sl], xq[sl]).detach()
            )
    preds = torch.cat(parts)  # (E, len(steps), Nq)
    return {s: preds[:, i] for i, s in enumerate(sorted(steps))}
