"""ppo.forced_decisions: a step whose mask leaves one valid action is no decision; under ``skip`` the policy's terms
(surrogate, entropy, KL, clip fraction, the prior's pull) and the advantages' normalisation read only the steps that
had a choice, so a scale agent whose rule orders on one bar in seven does not have its policy terms shrunk sevenfold
(clstm_ppo/agent/ppo.py)."""
import numpy as np
import pytest
import torch
from test_agent import collect_rollout

from clstm_ppo.agent.ppo import DistinctBarsLoss, choice_weights, normalise_advantages, ppo_losses
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.static_update import StaticMinibatchLoss
from clstm_ppo.config import ConfigError, PPOConfig, load_config

CPU = torch.device("cpu")


def minibatch(seed: int = 0, steps: int = 30, envs: int = 4, actions: int = 5, free_share: float = 0.1):
    """A minibatch whose mask leaves one valid action (the first) on most steps."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(steps, envs, actions, dtype=torch.bool)
    mask[..., 0] = True
    free = torch.rand(steps, envs, generator=g) < free_share
    free[0, 0] = True
    mask[free] = True
    logits = torch.randn(steps, envs, actions, generator=g).masked_fill(~mask, -1e9).requires_grad_()
    actions_taken = torch.where(free, torch.randint(0, actions, (steps, envs), generator=g), 0)
    old = torch.log_softmax(logits.detach() + 0.1 * torch.randn(steps, envs, actions, generator=g), -1)
    old_logprobs = old.gather(-1, actions_taken.unsqueeze(-1)).squeeze(-1)
    old_logprobs = torch.where(free, old_logprobs, torch.zeros(()))  # a forced action's log-prob is 0
    advantages = torch.randn(steps, envs, generator=g)
    values, returns = torch.randn(steps, envs, generator=g), torch.randn(steps, envs, generator=g)
    return mask, free, logits, actions_taken, old_logprobs, advantages, values, returns


def losses(cfg, mask, logits, actions, old_logprobs, advantages, values, returns):
    prior = torch.zeros_like(actions)
    return ppo_losses(logits, values, actions, old_logprobs, advantages, returns, values.detach(), prior,
                      torch.zeros(()), cfg, choice_weights(mask, cfg))


def test_skip_reads_the_policy_terms_of_the_free_steps_alone():
    mask, free, logits, actions, old_logprobs, advantages, values, returns = minibatch()
    cfg = PPOConfig(forced_decisions="skip", ent_coef=0.0, vf_coef=0.0)
    loss, stats = losses(cfg, mask, logits, actions, old_logprobs, advantages, values, returns)
    # plain numpy: the clipped surrogate's mean over the free steps
    lp = torch.log_softmax(logits.detach(), -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1).numpy()
    ratio = np.exp(lp - old_logprobs.numpy())
    adv = advantages.numpy()
    surrogate = np.maximum(-adv * ratio, -adv * np.clip(ratio, 0.8, 1.2))
    assert float(stats[0]) == pytest.approx(surrogate[free.numpy()].mean(), rel=1e-5)
    # the forced steps' advantages change nothing
    moved = torch.where(free, advantages, advantages + 100.0)
    assert float(losses(cfg, mask, logits, actions, old_logprobs, moved, values, returns)[0].detach()) == \
        pytest.approx(float(loss.detach()), rel=1e-6)


def test_skip_gives_the_free_steps_the_gradient_counting_divides_by_the_steps():
    mask, free, logits, actions, old_logprobs, advantages, values, returns = minibatch()
    grads = {}
    for mode in ("count", "skip"):
        cfg = PPOConfig(forced_decisions=mode, vf_coef=0.0)
        logits.grad = None
        losses(cfg, mask, logits, actions, old_logprobs, advantages, values, returns)[0].backward()
        grads[mode] = logits.grad.clone()
    assert torch.all(grads["count"][~free] == 0) and torch.all(grads["skip"][~free] == 0)  # no decision: no gradient
    share = float(free.float().mean())
    torch.testing.assert_close(grads["count"], grads["skip"] * share, rtol=1e-5, atol=1e-9)


def test_with_a_choice_at_every_step_skip_is_count():
    mask, _, logits, actions, old_logprobs, advantages, values, returns = minibatch(free_share=1.1)
    count = losses(PPOConfig(), mask, logits, actions, old_logprobs, advantages, values, returns)
    skip = losses(PPOConfig(forced_decisions="skip"), mask, logits, actions, old_logprobs, advantages, values, returns)
    torch.testing.assert_close(skip[0], count[0])
    torch.testing.assert_close(skip[1], count[1])


def test_the_advantages_are_normalised_over_the_free_steps():
    mask, free, *_ = minibatch(seed=1, free_share=0.3)
    advantages = torch.randn(free.shape, generator=torch.Generator().manual_seed(5)) * 3 + 1
    got = normalise_advantages(advantages, None, choice_weights(mask, PPOConfig(forced_decisions="skip")))
    picked = advantages[free].double()
    want = (advantages.double() - picked.mean()) / (picked.std(unbiased=False) + 1e-8)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert choice_weights(mask, PPOConfig()) is None  # count: every step, as before


def test_the_static_loss_skips_as_the_eager_one_does():
    model, storage, env = collect_rollout(num_envs=6, steps=40, episode_length=9, warmup_steps=3)
    storage.mask[::2, :, 1:] = False  # every other step: one valid action
    cfg, prec = PPOConfig(num_minibatches=2, forced_decisions="skip"), Precision(CPU, "fp32")
    advantages = normalise_advantages(storage.advantages, None, choice_weights(storage.mask, cfg))
    idx = torch.tensor([4, 1, 3])
    eager = DistinctBarsLoss(model, env.market_windows, storage, cfg, prec)(idx, advantages)
    static = StaticMinibatchLoss(model, env.market_windows, storage, cfg, prec, compile=False)(idx, advantages)
    torch.testing.assert_close(static[0], eager[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(static[1], eager[1], rtol=1e-5, atol=1e-6)


def test_forced_decisions_takes_count_or_skip():
    assert load_config("smoke", ["ppo.forced_decisions=skip"]).ppo.forced_decisions == "skip"
    with pytest.raises(ConfigError, match="ppo.forced_decisions"):
        load_config("smoke", ["ppo.forced_decisions=sometimes"])
