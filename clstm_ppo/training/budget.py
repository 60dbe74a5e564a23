"""How far a run has come (its counters) and how far it goes: env steps per update, the planned
budget the learning rate decays over, and when it is spent (docs/TRAINING.md, "Learning rate")."""

from __future__ import annotations

import math
from dataclasses import dataclass

from clstm_ppo.agent.ppo import lr_factor
from clstm_ppo.config import Config


@dataclass
class Progress:
    """The run's counters at an update boundary, as its checkpoints keep them."""

    update: int = 0
    global_step: int = 0  # env steps, all ranks
    episodes: int = 0  # full-length episodes ended, all ranks


@dataclass(frozen=True)
class Budget:
    """One launch's budget: fixed by its settings and world size (a resume recomputes
    it from its own)."""

    batch_size: int  # env steps per update, all ranks
    # env steps the learning rate decays over (num_episodes: estimated at full length)
    planned_steps: int
    planned_updates: int
    base_lr: float  # ppo.learning_rate, times the workers under ppo.scale_lr_with_workers
    cfg: Config

    @classmethod
    def of(cls, cfg: Config, world_size: int, episode_length: int) -> Budget:
        t, p = cfg.train, cfg.ppo
        batch = t.num_envs * p.num_steps * world_size
        planned = max(
            1, t.num_episodes * max(episode_length, 1) if t.num_episodes > 0 else t.total_steps
        )
        return cls(
            batch,
            planned,
            max(1, math.ceil(planned / batch)),
            p.learning_rate * (world_size if p.scale_lr_with_workers else 1),
            cfg,
        )

    def learning_rate(self, progress: Progress) -> float:
        """The rate of the update after ``progress``: the base rate by the warm-up and the
        env-step schedule."""
        return self.base_lr * lr_factor(
            progress.update, progress.global_step, self.planned_steps, self.cfg.ppo
        )

    def reached(self, progress: Progress) -> bool:
        t = self.cfg.train
        return (
            progress.episodes >= t.num_episodes
            if t.num_episodes > 0
            else progress.global_step >= t.total_steps
        )
