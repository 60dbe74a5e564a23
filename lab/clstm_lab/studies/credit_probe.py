"""What the update learns from, on the planted market: a scale agent's decisions, update by update, split by the
hidden premium's state and the multiple chosen, with the advantage PPO gives each (docs/PLANTED.md, "Why").

A trainer of the given settings runs its own rollouts and updates; before each update the probe reads the stored
rollout: where the rule ordered (a free choice), the mean advantage of each multiple on rich and on other bars,
their counts, and the multiple the behaviour policy chose on average in each state. ``bandit`` replaces the
rollout's rewards with a clean contextual bandit on the same decisions (the chosen multiple times the rich edge, plus
noise of that standard deviation, paid at once): what the learner does when credit is no problem.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from clstm_ppo.backtest.oracle import RICH, true_premium
from clstm_ppo.config import load_config
from clstm_ppo.training.runner import Trainer

RICH_EDGE = 0.033  # a 1x sale's mean reward on a rich bar of the default planted market (docs/PLANTED.md)


def probe_rows(sets: list[str], run_dir: Path, updates: int, bandit: float | None = None,
               seed: int = 0) -> Iterator[dict[str, Any]]:
    """One row per (update, state, multiple): the trainer of ``sets`` on ``--config planted`` for ``updates``."""
    cfg = load_config("planted", [*sets, f"seed={seed}"])
    trainer = Trainer(cfg, run_dir, torch.device("cpu"))
    if cfg.agent.actions != "scale":
        raise ValueError("the probe reads a scale agent's multiples: set agent.actions=scale")
    rich_by_row = torch.as_tensor(true_premium(trainer.data, cfg).reshape(-1) > RICH)
    multiples = torch.tensor(cfg.agent.scale_multiples)
    noise = torch.Generator().manual_seed(seed)
    for update in range(updates):
        trainer.collect()
        s = trainer.rollout.storage
        free, rich = s.mask.sum(-1) > 1, rich_by_row[s.rows]
        if bandit is not None:
            paid = multiples[s.actions] * (RICH_EDGE * rich + bandit * torch.randn(s.rewards.shape, generator=noise))
            s.rewards = torch.where(free, paid, torch.zeros_like(s.rewards))
            s.finish(s.values[-1], cfg.ppo.gamma, cfg.ppo.gae_lambda)
        chosen = {state: float(multiples[s.actions[free & (rich == state)]].mean()) for state in (True, False)}
        stats = trainer.optimise()
        trainer.progress.update += 1
        trainer.progress.global_step += trainer.budget.batch_size
        for state in (True, False):
            for k, multiple in enumerate(cfg.agent.scale_multiples):
                here = free & (rich == state) & (s.actions == k)
                yield {"update": update, "rich": state, "multiple": multiple, "decisions": int(here.sum()),
                       "mean_advantage": float(s.advantages[here].mean()) if here.any() else float("nan"),
                       "advantage_sd": float(s.advantages[free].std()), "chosen_multiple": chosen[state],
                       "approx_kl": stats["approx_kl"], "entropy": stats["entropy"]}
