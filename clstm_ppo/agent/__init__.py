"""Agent: the cascaded-LSTM actor-critic, rollout storage with GAE, the recurrent PPO
update, pretraining."""

from clstm_ppo.agent.model import ActorCritic, MarketEncoder
from clstm_ppo.agent.ppo import UpdatePaths, normalise_advantages, ppo_update
from clstm_ppo.agent.storage import RolloutStorage, compute_gae

__all__ = [
    "ActorCritic",
    "MarketEncoder",
    "RolloutStorage",
    "UpdatePaths",
    "compute_gae",
    "normalise_advantages",
    "ppo_update",
]
