"""A prior from the rules (``pretrain.method: rule``): the policy starts as the best fixed
rule of the training years and PPO asks only when to deviate from it (docs/TRAINING.md, "A
prior from the rules").

1. The rule: every rule of ``backtest.rules.rule_family`` (or, ``prior.rules: conditional``, of
   the gated family of ``backtest.conditional``) walked over the training split, the best by
   Sharpe over the T-bill kept (picked on "train": no validation or test bar is read; a gate reads
   bars up to its own).
2. Cloning: the training env's copies follow the rule for a rollout at a time, the model's greedy
   decisions are scored against the rule's on that fresh rollout, and the whole policy (LSTM 1, MLP,
   LSTM 2, actor) is fitted to the rule's actions by cross-entropy (or a target smoothed over the
   valid actions, ``prior.smoothing``), the critic to the rule's returns (GAE, as PPO's value loss),
   until a fresh rollout's decisions match at ``prior.accuracy`` or ``prior.rollouts`` are spent.
3. Optionally, ``prior.kl``: PPO's loss keeps -log pi(the rule's action) at that weight, falling
   linearly to 0 at ``prior.kl_until`` of the planned env steps (``prior_coef``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from types import SimpleNamespace

import torch
from torch import Tensor, nn

from clstm_ppo.agent.model import State
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.rollout import action_logprob, collect
from clstm_ppo.agent.storage import RolloutStorage, credit_settings
from clstm_ppo.backtest.conditional import pick_conditional_rule
from clstm_ppo.backtest.gates import ALWAYS, gate_series
from clstm_ppo.backtest.rules import FixedRule, GatedRule, RulePick, follow_rules, pick_rule
from clstm_ppo.config import Config
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.env import ActionSpace, BatchedOptionsEnv, Observation
from clstm_ppo.env.scaled import ScaledRule

PRIOR_SPLIT = "train"
PRIOR_METRIC = "sharpe_excess"  # what the policy is judged by

# (portfolio (..., P), mask (..., A), row (...)) -> the rule's actions (...);
# row = s * T + t, the bar observed
RuleActions = Callable[[Tensor, Tensor, Tensor], Tensor]


def pick_prior(data: MarketData, cfg: Config, device: torch.device) -> RulePick:
    """The best rule of the training split by Sharpe over the T-bill, of the family
    ``prior.rules`` names."""
    if cfg.prior.rules == "conditional":
        return pick_conditional_rule(data, cfg, device, PRIOR_METRIC, PRIOR_SPLIT)
    return pick_rule(data, cfg, device, PRIOR_METRIC, PRIOR_SPLIT)


def rule_actions(
    pick: RulePick, data: MarketData, cfg: Config, device: torch.device
) -> RuleActions:
    """The rule's action for observed portfolios, masks and bars (rows of ``data``, the env's) of
    any leading shape: a function of the observation alone, so the update reads it from the stored
    rollout, whichever path collected it. A gated rule follows its rule where its gate is open at
    the observed bar, and keeps only its shares where it is shut."""
    gated = pick.rule if isinstance(pick.rule, GatedRule) else GatedRule(pick.rule, ALWAYS)
    switch = [gated.rule, FixedRule(gated.rule.stock, None)]  # 0: the rule; 1: its shares alone
    follow = follow_rules(
        switch, ActionSpace.from_config(cfg.market), cfg.env.max_positions, device
    )
    always = gated.gate == ALWAYS  # no gate to read: the env's bars need not be the picking data's
    shut = (
        None
        if always
        else torch.as_tensor(
            ~gate_series(data, cfg.market)[gated.gate].reshape(-1), dtype=torch.long, device=device
        )
    )

    def act(portfolio: Tensor, mask: Tensor, row: Tensor) -> Tensor:
        flat = SimpleNamespace(
            portfolio=portfolio.reshape(-1, portfolio.shape[-1]),
            mask=mask.reshape(-1, mask.shape[-1]),
        )
        which = torch.zeros_like(row.reshape(-1)) if shut is None else shut[row.reshape(-1)]
        chosen = follow(flat, which)
        return chosen.view(mask.shape[:-1])

    return act


def one_times(one: int, portfolio: Tensor, mask: Tensor, row: Tensor) -> Tensor:  # noqa: ARG001
    """A ``scale`` agent's prior at every decision: 1x, the index ``one``
    (``RuleActions``' signature)."""
    return torch.full(mask.shape[:-1], one, dtype=torch.long, device=mask.device)


def prior_coef(cfg: Config, env_steps: int, planned_steps: int) -> float:
    """The prior penalty's weight for an update taken after ``env_steps`` of ``planned_steps``."""
    return cfg.prior.kl * max(0.0, 1.0 - env_steps / (cfg.prior.kl_until * planned_steps))


def _sequence_forward(
    model: nn.Module, windows, s: RolloutStorage, idx: Tensor, precision: Precision
) -> tuple[Tensor, Tensor]:
    """The model's logits and values over the stored sequences of copies ``idx`` (as the eager
    PPO loss runs them)."""
    h0, c0 = s.initial_state
    bars, bar_index = torch.unique(s.rows[:, idx], return_inverse=True)
    with precision.autocast():
        logits, values, _ = model(
            windows.gather(bars),
            s.portfolio[:, idx],
            s.mask[:, idx],
            s.starts[:, idx],
            (h0[:, idx], c0[:, idx]),
            bar_index,
        )
    return logits.float(), values.float()


def cloning_loss(
    logits: Tensor, actions: Tensor, mask: Tensor, weight: Tensor, smoothing: float
) -> Tensor:
    """Cross-entropy from cloning's target to the policy, each decision weighted by the rarity of
    the rule's action there (``weight[action]``). The target is the rule's action, or with
    ``smoothing`` > 0 that share of it spread evenly over the decision's valid actions (``mask``)
    and the rest on the rule's: a clone that keeps sampling the others, which PPO can then learn to
    prefer (docs/TRAINING.md, "A prior from the rules")."""
    # action_logprob's arithmetic, shared by both terms
    normalised = logits - logits.logsumexp(dim=-1, keepdim=True)
    log_target = normalised.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    if smoothing > 0.0:
        # at 0 the sum is the rule's log-probability alone, as runs before the setting computed it
        valid = mask.to(normalised.dtype)
        # a masked action's -1e9 times 0 adds 0
        spread = (normalised * valid).sum(-1) / valid.sum(-1)
        log_target = (1.0 - smoothing) * log_target + smoothing * spread
    return -(weight[actions] * log_target).mean()


def clone_rule(
    model: nn.Module,
    env: BatchedOptionsEnv,
    obs: Observation,
    lstm_state: State,
    act: RuleActions,
    cfg: Config,
    generator: torch.Generator,
) -> tuple[list[dict], Observation, State]:
    """Fit ``model`` to the rule ``act`` on the training env's copies, from ``obs``, in float32; one
    record per rollout (the share of its decisions the model's greedy choice matched before fitting
    on it, the median probability it gave the rule's action, the cross-entropy after). Returns the
    records and where the env and LSTM 2 state stand."""
    p = cfg.ppo
    precision = Precision(obs.row.device, "fp32")
    storage = RolloutStorage(
        p.num_steps,
        env.num_envs,
        obs.portfolio.shape[-1],
        env.actions.n,
        obs.row.device,
        **credit_settings(cfg),
    )  # the critic learns the returns PPO will give it
    params = [q for q in model.parameters() if q.requires_grad]
    optimizer = torch.optim.Adam(params, lr=cfg.prior.lr)
    per_batch = max(1, env.num_envs // p.num_minibatches)
    history = []
    for rollout in range(cfg.prior.rollouts):
        obs, lstm_state = collect(
            model,
            env,
            storage,
            obs,
            lstm_state,
            precision,
            p,
            None,
            act=lambda o: act(o.portfolio, o.mask, o.row),
        )
        # the rule's episodes are not the agent's: the training log starts after cloning
        env.take_episode_sums()
        with torch.no_grad():
            logits, _ = _sequence_forward(
                model, env.market_windows, storage, torch.arange(env.num_envs), precision
            )
            matched = float((logits.argmax(-1) == storage.actions).float().mean())
            p_rule = float(action_logprob(logits, storage.actions).exp().median())
        record = {"rollout": rollout, "matched": matched, "p_rule": p_rule}
        history.append(record)
        if matched >= cfg.prior.accuracy:
            break
        # Each action the rule took weighs as much as any other: a rule that sells once a
        # month and holds between would otherwise be cloned as "always hold", right on
        # 95% of the decisions and useless.
        taken = torch.bincount(storage.actions.flatten(), minlength=env.actions.n).float()
        weight = torch.where(
            taken > 0, taken.sum() / (taken * (taken > 0).sum()), torch.zeros_like(taken)
        )
        for _ in range(cfg.prior.epochs):
            order = torch.randperm(env.num_envs, generator=generator).to(obs.row.device)
            for idx in order.split(per_batch):
                logits, values = _sequence_forward(
                    model, env.market_windows, storage, idx, precision
                )
                cross_entropy = cloning_loss(
                    logits,
                    storage.actions[:, idx],
                    storage.mask[:, idx],
                    weight,
                    cfg.prior.smoothing,
                )
                value_loss = 0.5 * ((values - storage.returns[:, idx]) ** 2).mean()
                loss = cross_entropy + p.vf_coef * value_loss
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(params, p.max_grad_norm)
                optimizer.step()
        record["cross_entropy"] = float(cross_entropy.detach())
    return history, obs, lstm_state


class RulePrior:
    """The rule a run starts from, and its penalty in every update (``prior.kl``)."""

    def __init__(
        self,
        data: MarketData,
        cfg: Config,
        device: torch.device,
        env_data: MarketData | None = None,
        scaled: ScaledRule | None = None,
    ):
        """``data``: where the rule is picked (the real training years); ``env_data``: the training
        env's bars, when they are more (``data.augment``), which a gate is read on. ``scaled``: a
        ``scale`` agent's rule, whose 1x is the prior (the rule as it is, at every decision), picked
        when the run started."""
        self.cfg, self.scaled = cfg, scaled
        if scaled is not None:
            self.pick = None
            self.act = partial(one_times, scaled.one)
            return
        # the same on every rank and on a resume: a pure function of data
        self.pick = pick_prior(data, cfg, device)
        self.act = rule_actions(self.pick, data if env_data is None else env_data, cfg, device)

    def describe(self) -> str:
        if self.scaled is not None:
            return f"prior: 1x {self.scaled.name} (agent.actions scale: the rule as it is)"
        return (
            f"prior: {self.pick.name}, the best {self.pick.metric} ({self.pick.score:.3f}) of "
            f"{self.pick.tried} fixed rules on {self.pick.split} {self.pick.walked}"
        )

    def clone(
        self,
        model: nn.Module,
        env: BatchedOptionsEnv,
        obs: Observation,
        lstm_state: State,
        generator: torch.Generator,
    ) -> tuple[str, Observation, State]:
        """Clone the rule into ``model``; a line saying how far it got, and where the env
        and LSTM 2 stand."""
        history, obs, lstm_state = clone_rule(
            model, env, obs, lstm_state, self.act, self.cfg, generator
        )
        last = history[-1]
        line = (
            f"{self.describe()}; behaviour cloning matched {last['matched']:.1%} of a fresh "
            f"rollout's decisions after {last['rollout']} rollout(s) of it (asked: "
            f"{self.cfg.prior.accuracy:.0%}), the rule's action at median probability "
            f"{last['p_rule']:.3f}"
        )
        return line, obs, lstm_state

    def fill(self, storage: RolloutStorage, env_steps: int, planned_steps: int) -> float:
        """The rule's actions at the stored decisions and this update's penalty weight, for the
        update's loss; the weight."""
        coef = prior_coef(self.cfg, env_steps, planned_steps)
        storage.prior_coef.fill_(coef)
        # its -log pi is logged either way
        storage.prior_actions.copy_(self.act(storage.portfolio, storage.mask, storage.rows))
        return coef
