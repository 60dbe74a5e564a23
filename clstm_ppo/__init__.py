"""clstm_ppo: a cascaded-LSTM PPO agent that trades options.

Data flows data -> market -> env -> agent -> train -> checkpoints, one sub-package each.
Importing the package registers ``clstm_ppo/OptionsTrading-v0`` with gymnasium.
"""

import gymnasium as _gym

__version__ = "0.1.0"

if "clstm_ppo/OptionsTrading-v0" not in _gym.registry:
    _gym.register(
        id="clstm_ppo/OptionsTrading-v0", entry_point="clstm_ppo.env.gym_env:OptionsTradingEnv"
    )
