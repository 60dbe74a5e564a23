"""The run's PPO update of each stored rollout (docs/TRAINING.md, "Compiled and captured paths")."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from clstm_ppo.agent import RolloutStorage, UpdatePaths, ppo_update
from clstm_ppo.agent.optimizer_step import OptimizerStep, set_lr
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.static_update import StaticMinibatchLoss
from clstm_ppo.config import Config
from clstm_ppo.distributed import DistContext
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.pretraining.rule_prior import RulePrior
from clstm_ppo.training.plan import ExecutionPlan


class Update:
    """One PPO update per call, in the form the plan names: the eager loss (through DDP's wrapper on
    several ranks), or the static loss in fixed shapes (compiled, its graphs replayed where asked)
    that averages its own gradients; the clip and Adam step eager or captured; and the rule prior's
    pull (``prior.kl``) where the run has one."""

    def __init__(
        self,
        model: nn.Module,
        train_model: nn.Module,
        optimizer: torch.optim.Optimizer,
        storage: RolloutStorage,
        env: BatchedOptionsEnv,
        precision: Precision,
        plan: ExecutionPlan,
        cfg: Config,
        ctx: DistContext,
        minibatches: torch.Generator,
        prior: RulePrior | None,
    ):
        """Made after a resume loaded the optimizer's state: a captured step binds the
        tensors it holds then. ``train_model``: what the eager loss trains through (DDP's
        wrapper, or ``model``)."""
        self.model, self.train_model, self.optimizer, self.storage = (
            model,
            train_model,
            optimizer,
            storage,
        )
        self.windows, self.precision, self.ppo, self.minibatches, self.prior = (
            env.market_windows,
            precision,
            cfg.ppo,
            minibatches,
            prior,
        )
        self.static_loss = (
            StaticMinibatchLoss(
                model,
                env.market_windows,
                storage,
                cfg.ppo,
                precision,
                cuda_graphs=plan.update_graphs,
            )
            if plan.update == "static"
            else None
        )
        self.optimizer_step = (
            OptimizerStep(optimizer, cfg.ppo.max_grad_norm, plan.optimizer_step == "captured")
            if precision.scaler is None
            else None
        )
        self.mean = ctx.all_reduce_mean if ctx.enabled else None
        # The static loss trains the raw module, so its gradients are averaged here, not by DDP.
        self.average = (
            partial(ctx.average_gradients, model) if plan.gradients == "all_reduce" else None
        )

    def __call__(self, lr: float, env_steps: int, planned_steps: int) -> dict[str, float]:
        """One PPO update on the stored rollout at learning rate ``lr``, ``env_steps`` into
        ``planned_steps``; the update's statistics."""
        set_lr(self.optimizer, lr)  # into the rate tensor a captured step reads, if it is one
        coef = self.prior.fill(self.storage, env_steps, planned_steps) if self.prior else 0.0
        stats = ppo_update(
            self.train_model,
            self.optimizer,
            self.storage,
            self.windows,
            self.ppo,
            self.minibatches,
            UpdatePaths(
                self.precision, self.static_loss, self.mean, self.average, self.optimizer_step
            ),
        )
        return {**stats, "learning_rate": lr, "prior_coef": coef}

    @property
    def optimizer_step_path(self) -> str:
        """How the update's clip and Adam step ran: "captured" or "eager" (always eager
        under fp16's scaler)."""
        return self.optimizer_step.path if self.optimizer_step is not None else "eager"

    @property
    def path(self) -> str:
        """How the update's minibatch loss ran: "graphs" (replayed as CUDA graphs), "compiled" or
        "eager"; "compiled" with a count where CUDA graphs were asked for and inductor compiled some
        of its graphs without them."""
        if self.static_loss is None:
            return "eager"
        if not self.static_loss.cuda_graphs:
            return "compiled"
        skips = self.static_loss.cudagraph_skips
        return f"compiled (graphs without CUDA graphs: {skips})" if skips else "graphs"
