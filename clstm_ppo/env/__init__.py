"""Trading environment: a batched torch env (N copies at once) and a gymnasium
wrapper over one copy."""

from clstm_ppo.env.actions import ActionSpace
from clstm_ppo.env.observation import PORTFOLIO_FEATURES, BookedPosition, Observation, StepResult
from clstm_ppo.env.options_env import BatchedOptionsEnv

__all__ = [
    "ActionSpace",
    "BatchedOptionsEnv",
    "BookedPosition",
    "Observation",
    "PORTFOLIO_FEATURES",
    "StepResult",
]
