"""Recurrent PPO update (clipped surrogate, clipped value loss, entropy bonus), CleanRL-style.

Minibatches are groups of whole env sequences replayed from the stored
rollout-start state of LSTM 2, so truncated BPTT covers the full rollout and
every worker runs the same number of minibatches.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import Tensor, nn

from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.storage import RolloutStorage
from clstm_ppo.config import PPOConfig
from clstm_ppo.data.windows import MarketWindows


def lr_factor(update: int, env_steps: int, planned_steps: int, cfg: PPOConfig) -> float:
    """Multiplier of the base learning rate for update ``update`` (0-based), taken after ``env_steps`` of the
    ``planned_steps`` budget: a warm-up over the first updates, then the schedule by env steps, so a resume on
    another number of workers (another batch) continues the same decay instead of restarting or ending it."""
    warm = min(1.0, (update + 1) / cfg.warmup_updates) if cfg.warmup_updates > 0 else 1.0
    decay = max(0.0, 1.0 - env_steps / planned_steps) if cfg.lr_schedule == "linear" else 1.0
    return warm * decay


def normalise_advantages(advantages: Tensor, all_reduce_mean: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """Normalise with statistics over the whole rollout (of every worker, given ``all_reduce_mean``)."""
    moments = torch.stack([advantages.mean(), (advantages * advantages).mean()])
    if all_reduce_mean is not None:
        moments = all_reduce_mean(moments)
    mean, mean_sq = moments[0], moments[1]
    std = (mean_sq - mean * mean).clamp_min(0).sqrt()
    return (advantages - mean) / (std + 1e-8)


def ppo_update(model: nn.Module, optimizer: torch.optim.Optimizer, storage: RolloutStorage,
               windows: MarketWindows, cfg: PPOConfig, generator: torch.Generator,
               all_reduce_mean: Callable[[Tensor], Tensor] | None = None, precision: Precision | None = None,
               ) -> dict[str, float]:
    """One PPO update over ``storage``; ``model`` may be DDP-wrapped (its forward syncs gradients).

    ``windows`` (the env's ``market_windows``) turns the stored flat rows back into market windows. With
    ``cfg.grad_accumulation = k``, gradients of k minibatches are summed before one optimizer
    step (under DDP only the k-th backward all-reduces).
    """
    s = storage
    precision = precision or Precision(s.rows.device, "fp32")
    advantages = normalise_advantages(s.advantages, all_reduce_mean) if cfg.norm_adv else s.advantages
    h0, c0 = s.initial_state
    envs_per_batch = s.num_envs // cfg.num_minibatches
    accumulate = cfg.grad_accumulation
    totals = torch.zeros(5, device=s.rows.device)  # policy, value loss, entropy, approx KL, clip fraction
    batches, encoded = 0, 0
    for _ in range(cfg.update_epochs):
        order = torch.randperm(s.num_envs, generator=generator, device="cpu").to(s.rows.device)
        kl_this_epoch = []
        optimizer.zero_grad(set_to_none=True)
        for k in range(cfg.num_minibatches):
            idx = order[k * envs_per_batch:(k + 1) * envs_per_batch]
            stepping = (k + 1) % accumulate == 0
            sync = contextlib.nullcontext() if stepping or not hasattr(model, "no_sync") else model.no_sync()
            with sync:
                # A window depends only on its bar: encode each distinct bar of the minibatch once (copies on one
                # underlying share bars, so at many copies the minibatch repeats each bar's LSTM 1 work).
                bars, bar_index = torch.unique(s.rows[:, idx], return_inverse=True)
                encoded += bars.numel()
                with precision.autocast():
                    logits, values, _ = model(windows.gather(bars), s.portfolio[:, idx], s.mask[:, idx],
                                              s.starts[:, idx], (h0[:, idx], c0[:, idx]), bar_index)
                logits, values = logits.float(), values.float()  # losses in float32 under any precision
                dist = torch.distributions.Categorical(logits=logits, validate_args=False)  # no host syncs
                logprob = dist.log_prob(s.actions[:, idx])
                log_ratio = logprob - s.logprobs[:, idx]
                ratio = log_ratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - log_ratio).mean()  # the low-variance estimator (Schulman, 2020)
                    clip_fraction = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()
                adv = advantages[:, idx]
                policy_loss = torch.max(-adv * ratio,
                                        -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
                returns, old_values = s.returns[:, idx], s.values[:, idx]
                if cfg.clip_vloss:  # clip the value step like the policy step (CleanRL's option)
                    clipped = old_values + (values - old_values).clamp(-cfg.clip_coef, cfg.clip_coef)
                    value_loss = 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2).mean()
                else:
                    value_loss = 0.5 * ((values - returns) ** 2).mean()
                entropy = dist.entropy().mean()
                loss = policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss
                precision.backward(loss / accumulate)  # the mean over the k minibatches' sequences
            if stepping:
                if not precision.step(model, optimizer, cfg.max_grad_norm):
                    # Gradients are all-reduced, so every rank sees the same non-finite norm and stops here too.
                    return {"nonfinite": 1.0}
                optimizer.zero_grad(set_to_none=True)
            totals += torch.stack([policy_loss, value_loss, entropy, approx_kl, clip_fraction]).detach()
            kl_this_epoch.append(approx_kl)
            batches += 1
        if cfg.target_kl is not None:
            mean_kl = torch.stack(kl_this_epoch).mean()
            if all_reduce_mean is not None:
                mean_kl = all_reduce_mean(mean_kl)  # every worker takes the same decision
            if float(mean_kl) > cfg.target_kl:
                break
    variance = s.returns.var()
    explained = torch.where(variance > 0, 1 - (s.returns - s.values).var() / variance, float("nan"))
    names = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance")
    values = torch.cat([totals / max(batches, 1), explained.view(1).to(totals.dtype)]).tolist()  # one host sync
    stats = dict(zip(names, values, strict=True))
    stats["nonfinite"] = 0.0
    stats["lstm1_encodes_per_minibatch"] = encoded / max(batches, 1)  # distinct bars, against ...
    stats["decisions_per_minibatch"] = float(s.rows.shape[0] * envs_per_batch)  # ... what per-window encoding ran
    return stats
