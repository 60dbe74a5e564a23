"""Model selection on the validation split: the best score of each metric and the patience count."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clstm_ppo.metrics import BEST_METRICS


@dataclass
class Selection:
    best: dict[str, float] = field(default_factory=dict)  # metric -> best validation score so far
    last_eval: dict[str, float] = field(default_factory=dict)
    evals_without_best: int = 0  # evaluations since the composite last improved (early stopping's count)

    def record(self, metrics: dict[str, float]) -> list[str]:
        """Take one evaluation's ``metrics``; return the metrics it is a new best of (their checkpoints to write)."""
        self.last_eval = dict(metrics)
        improved_composite = metrics["composite"] > self.best.get("composite", float("-inf"))
        self.evals_without_best = 0 if improved_composite else self.evals_without_best + 1
        improved = [name for name in BEST_METRICS if name not in self.best or metrics[name] > self.best[name]]
        self.best.update({name: metrics[name] for name in improved})
        return improved

    def state_dict(self) -> dict[str, Any]:
        return {"best": dict(self.best), "last_eval": dict(self.last_eval),
                "evals_without_best": self.evals_without_best}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.last_eval = dict(state["best"]), dict(state.get("last_eval", {}))
        self.evals_without_best = state.get("evals_without_best", 0)
