"""clstm_ppo: a cascaded-LSTM PPO agent that trades options.

Data flows data -> market -> env -> agent -> train -> checkpoints, one sub-package each.
"""
__version__ = "0.1.0"
