"""Model selection on the validation split: the best score of each metric and the patience count.

One validation walk's composite is noisy (its profit rate is 0 or 1 with one underlying), and the
best of many noisy evaluations is optimistic. ``composite_smoothed``, the mean composite of the last
``window`` evaluations, picks the end of a good stretch instead of a lucky walk:
best_composite_smoothed.pt beside best_composite.pt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from clstm_ppo.run_files.checkpoint import BEST_METRICS


@dataclass
class Selection:
    best: dict[str, float] = field(default_factory=dict)  # metric -> best validation score so far
    last_eval: dict[str, float] = field(default_factory=dict)
    # evaluations since the composite last improved (early stopping's count)
    evals_without_best: int = 0
    window: int = 3  # evaluations the smoothed composite averages (train.selection_window)
    recent: list[float] = field(default_factory=list)  # the last ``window`` evaluations' composites

    def record(self, metrics: dict[str, float]) -> list[str]:
        """Take one evaluation's ``metrics`` (adding ``composite_smoothed`` to them); return the
        metrics it is a new best of (their checkpoints to write)."""
        self.recent = [*self.recent, metrics["composite"]][-self.window :]
        full = len(self.recent) == self.window  # before that, one lucky walk would be its own mean
        metrics["composite_smoothed"] = sum(self.recent) / self.window if full else math.nan
        self.last_eval = dict(metrics)
        improved_composite = metrics["composite"] > self.best.get("composite", float("-inf"))
        self.evals_without_best = 0 if improved_composite else self.evals_without_best + 1
        improved = [
            name
            for name in BEST_METRICS
            if math.isfinite(metrics[name])
            and (name not in self.best or metrics[name] > self.best[name])
        ]
        self.best.update({name: metrics[name] for name in improved})
        return improved

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": dict(self.best),
            "last_eval": dict(self.last_eval),
            "evals_without_best": self.evals_without_best,
            "recent_composites": list(self.recent),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.last_eval = dict(state["best"]), dict(state.get("last_eval", {}))
        self.evals_without_best = state.get("evals_without_best", 0)
        self.recent = list(state.get("recent_composites", []))
