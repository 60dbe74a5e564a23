"""Recurrent PPO update (clipped surrogate, clipped value loss, entropy bonus), CleanRL-style.

Minibatches are groups of whole env sequences replayed from the stored
rollout-start state of LSTM 2, so truncated BPTT covers the full rollout and
every worker runs the same number of minibatches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import torch
from torch import Tensor, nn

from clstm_ppo.agent.optimizer_step import OptimizerStep
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.rollout import action_logprob
from clstm_ppo.agent.storage import RolloutStorage
from clstm_ppo.config import PPOConfig
from clstm_ppo.data.windows import MarketWindows


def lr_factor(update: int, env_steps: int, planned_steps: int, cfg: PPOConfig) -> float:
    """Multiplier of the base learning rate for update ``update`` (0-based), taken after
    ``env_steps`` of the ``planned_steps`` budget: a warm-up over the first updates, then the
    schedule by env steps, so a resume on another number of workers (another batch) continues the
    same decay instead of restarting or ending it."""
    warm = min(1.0, (update + 1) / cfg.warmup_updates) if cfg.warmup_updates > 0 else 1.0
    decay = max(0.0, 1.0 - env_steps / planned_steps) if cfg.lr_schedule == "linear" else 1.0
    return warm * decay


def normalise_advantages(
    advantages: Tensor,
    all_reduce_mean: Callable[[Tensor], Tensor] | None = None,
    choices: Tensor | None = None,
) -> Tensor:
    """Normalise with statistics over the whole rollout (of every worker, given
    ``all_reduce_mean``); with ``choices`` (1 where a decision had more than one valid action), over
    those decisions alone."""
    if choices is None:
        moments = torch.stack([advantages.mean(), (advantages * advantages).mean()])
    else:
        # the weighted sums' means and the weights' mean, divided only once every
        # rank's are averaged in
        moments = torch.stack(
            [
                (choices * advantages).mean(),
                (choices * advantages * advantages).mean(),
                choices.mean(),
            ]
        )
    if all_reduce_mean is not None:
        moments = all_reduce_mean(moments)
    if choices is not None:
        moments = moments[:2] / moments[2].clamp_min(1e-12)
    mean, mean_sq = moments[0], moments[1]
    std = (mean_sq - mean * mean).clamp_min(0).sqrt()
    return (advantages - mean) / (std + 1e-8)


STAT_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "prior_nll")


def choice_weights(mask: Tensor, cfg: PPOConfig) -> Tensor | None:
    """1 where a decision had more than one valid action, 0 where it had one, under
    ``ppo.forced_decisions: skip``; None (every decision counts) under ``count``."""
    return (mask.sum(-1) > 1).float() if cfg.forced_decisions == "skip" else None


def policy_mean(x: Tensor, choices: Tensor | None) -> Tensor:
    """The mean of a policy term over the decisions that had a choice (all of them
    without ``choices``)."""
    return x.mean() if choices is None else (choices * x).sum() / choices.sum().clamp_min(1.0)


def ppo_losses(
    logits: Tensor,
    values: Tensor,
    actions: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    returns: Tensor,
    old_values: Tensor,
    prior_actions: Tensor,
    prior_coef: Tensor,
    cfg: PPOConfig,
    choices: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One minibatch's PPO loss and its statistics (``STAT_NAMES``), in float32 under any precision.
    A pure function of tensors: the static update compiles it as it stands. ``prior_coef`` x the
    mean -log pi(``prior_actions``) is the penalty that keeps a policy near the rule it was cloned
    from (the KL from that deterministic rule to the policy; docs/TRAINING.md, "A prior from the
    rules"). ``choices`` (``choice_weights``): the policy's terms average over the decisions that
    had a choice only; the value loss always over every step."""
    logits, values = logits.float(), values.float()
    normalised = logits - logits.logsumexp(dim=-1, keepdim=True)  # Categorical's normalised logits
    log_ratio = action_logprob(logits, actions) - old_logprobs
    ratio = log_ratio.exp()
    with torch.no_grad():
        # the low-variance estimator (Schulman, 2020)
        approx_kl = policy_mean((ratio - 1) - log_ratio, choices)
        clip_fraction = policy_mean(((ratio - 1.0).abs() > cfg.clip_coef).float(), choices)
    policy_loss = policy_mean(
        torch.max(
            -advantages * ratio, -advantages * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)
        ),
        choices,
    )
    if cfg.clip_vloss:  # clip the value step like the policy step (CleanRL's option)
        clipped = old_values + (values - old_values).clamp(-cfg.clip_coef, cfg.clip_coef)
        value_loss = 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2).mean()
    else:
        value_loss = 0.5 * ((values - returns) ** 2).mean()
    # a masked action adds 0 * -1e9 = 0
    entropy = policy_mean(-(normalised.exp() * normalised).sum(-1), choices)
    # the rule's action is never masked
    prior_nll = policy_mean(
        -normalised.gather(-1, prior_actions.unsqueeze(-1)).squeeze(-1), choices
    )
    loss = policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss + prior_coef * prior_nll
    return loss, torch.stack(
        [policy_loss, value_loss, entropy, approx_kl, clip_fraction, prior_nll]
    ).detach()


class MinibatchLoss(Protocol):
    """What ``ppo_update`` asks of a minibatch: its loss and statistics (``ppo_losses``) for the env
    copies ``idx`` of the stored rollout, with the rollout's normalised ``advantages``; ``encoded``
    counts its LSTM 1 windows."""

    encoded: int

    def __call__(self, idx: Tensor, advantages: Tensor) -> tuple[Tensor, Tensor]: ...


class DistinctBarsLoss:
    """The eager minibatch loss: LSTM 1 once per distinct bar of the minibatch (copies on one
    underlying share bars, so at many copies a minibatch repeats each bar many times), LSTM 2 in
    fused runs cut at episode starts. Both shapes depend on the data: fast eager, but neither
    compiles nor captures (``static_update`` does)."""

    def __init__(
        self,
        model: nn.Module,
        windows: MarketWindows,
        storage: RolloutStorage,
        cfg: PPOConfig,
        precision: Precision,
    ):
        self.model, self.windows, self.storage, self.cfg, self.precision = (
            model,
            windows,
            storage,
            cfg,
            precision,
        )
        self.encoded = 0

    def __call__(self, idx: Tensor, advantages: Tensor) -> tuple[Tensor, Tensor]:
        s = self.storage
        h0, c0 = s.initial_state
        bars, bar_index = torch.unique(s.rows[:, idx], return_inverse=True)
        self.encoded = bars.numel()
        with self.precision.autocast():
            logits, values, _ = self.model(
                self.windows.gather(bars),
                s.portfolio[:, idx],
                s.mask[:, idx],
                s.starts[:, idx],
                (h0[:, idx], c0[:, idx]),
                bar_index,
            )
        return ppo_losses(
            logits,
            values,
            s.actions[:, idx],
            s.logprobs[:, idx],
            advantages[:, idx],
            s.returns[:, idx],
            s.values[:, idx],
            s.prior_actions[:, idx],
            s.prior_coef,
            self.cfg,
            choice_weights(s.mask[:, idx], self.cfg),
        )


@dataclass
class UpdatePaths:
    """How an update computes and applies its gradients, each part optional (the trainer builds them
    from its ``training.plan.ExecutionPlan``): ``precision`` (fp32 without), ``minibatch_loss`` (the
    eager ``DistinctBarsLoss`` without; the static, compiled one of ``static_update``),
    ``all_reduce_mean`` (several ranks: the advantages' moments and the KL averaged),
    ``average_gradients`` (a loss that does not run through DDP's forward: its gradients averaged
    before each optimizer step), ``optimizer_step`` (the clip and Adam step over the optimizer as
    one object, e.g. replayed as a CUDA graph; precision's clip and step without)."""

    precision: Precision | None = None
    minibatch_loss: MinibatchLoss | None = None
    all_reduce_mean: Callable[[Tensor], Tensor] | None = None
    average_gradients: Callable[[], None] | None = None
    optimizer_step: OptimizerStep | None = None


def ppo_update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    storage: RolloutStorage,
    windows: MarketWindows,
    cfg: PPOConfig,
    generator: torch.Generator,
    paths: UpdatePaths | None = None,
) -> dict[str, float]:
    """One PPO update over ``storage``; ``model`` may be DDP-wrapped (its forward syncs gradients).

    ``windows`` (the env's ``market_windows``) turns the stored flat rows back into market windows.
    With ``cfg.grad_accumulation = k``, gradients of k minibatches are summed before one optimizer
    step (under DDP only the k-th backward all-reduces). ``paths`` says how (``UpdatePaths``). The
    statistics' ``nonfinite`` is 1 when some step's gradients or the weights it left were not
    finite: the weights are then unsound, not to be saved.
    """
    paths = paths or UpdatePaths()
    precision, minibatch_loss, optimizer_step = (
        paths.precision,
        paths.minibatch_loss,
        paths.optimizer_step,
    )
    all_reduce_mean, average_gradients = paths.all_reduce_mean, paths.average_gradients
    s = storage
    precision = precision or Precision(s.rows.device, "fp32")
    minibatch_loss = minibatch_loss or DistinctBarsLoss(model, windows, s, cfg, precision)
    if optimizer_step is not None and precision.scaler is not None:
        raise ValueError(
            "an optimizer_step does not unscale fp16 gradients: use fp32 or bf16, "
            "or no optimizer_step"
        )
    zero_grad = (
        optimizer_step.zero_grad
        if optimizer_step
        else partial(optimizer.zero_grad, set_to_none=True)
    )
    advantages = (
        normalise_advantages(s.advantages, all_reduce_mean, choice_weights(s.mask, cfg))
        if cfg.norm_adv
        else s.advantages
    )
    envs_per_batch = s.num_envs // cfg.num_minibatches
    accumulate = cfg.grad_accumulation
    totals = torch.zeros(len(STAT_NAMES), device=s.rows.device)
    # gradients and weights finite: read at the end
    finite = torch.ones((), dtype=torch.bool, device=s.rows.device)
    batches, encoded = 0, 0
    for _ in range(cfg.update_epochs):
        order = torch.randperm(s.num_envs, generator=generator, device="cpu").to(s.rows.device)
        kl_this_epoch = []
        zero_grad()
        for k in range(cfg.num_minibatches):
            idx = order[k * envs_per_batch : (k + 1) * envs_per_batch]
            stepping = (k + 1) % accumulate == 0
            sync = (
                contextlib.nullcontext()
                if stepping or not hasattr(model, "no_sync")
                else model.no_sync()
            )
            with sync:
                loss, stats = minibatch_loss(idx, advantages)
                precision.backward(loss / accumulate)  # the mean over the k minibatches' sequences
            encoded += minibatch_loss.encoded
            if stepping:
                if average_gradients is not None:
                    average_gradients()
                # A device flag, not a host check: a minibatch makes no sync of its own (a
                # non-finite gradient poisons the weights, and the caller stops without saving
                # them). Gradients are all-reduced, so every rank sees the same flag.
                finite &= (
                    optimizer_step()
                    if optimizer_step
                    else precision.step(model, optimizer, cfg.max_grad_norm)
                )
                zero_grad()
            totals += stats
            kl_this_epoch.append(stats[3])
            batches += 1
        if cfg.target_kl is not None:
            mean_kl = torch.stack(kl_this_epoch).mean()
            if all_reduce_mean is not None:
                mean_kl = all_reduce_mean(mean_kl)  # every worker takes the same decision
            if float(mean_kl) > cfg.target_kl:
                break
    variance = s.returns.var()
    explained = torch.where(variance > 0, 1 - (s.returns - s.values).var() / variance, float("nan"))
    # A step can also overflow the weights themselves; either way this update
    # is unsound and the caller stops.
    finite &= torch.stack([p.isfinite().all() for p in model.parameters()]).all()
    names = (*STAT_NAMES, "explained_variance", "nonfinite")
    values = torch.cat(
        [
            totals / max(batches, 1),
            explained.view(1).to(totals.dtype),
            (~finite).view(1).to(totals.dtype),
        ]
    ).tolist()  # one host sync
    stats = dict(zip(names, values, strict=True))
    # windows LSTM 1 encoded, against ...
    stats["lstm1_encodes_per_minibatch"] = encoded / max(batches, 1)
    # ... what per-window encoding ran
    stats["decisions_per_minibatch"] = float(s.rows.shape[0] * envs_per_batch)
    return stats
