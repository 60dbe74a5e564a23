"""The planted market's oracle: the policy that knows the hidden premium (docs/PLANTED.md). It sells
the 0.95 x 30-day put into every free slot while the true premium is rich (above ``RICH``) and
otherwise holds cash, its open puts running to expiry. It reads the premium the generator keeps
beside the bars (``data.planted.planted_state``), which no observation holds: a bound on what timing
the implied-vol features can earn, walked through the same env as every other policy.
"""

from __future__ import annotations

import numpy as np
import torch

from clstm_ppo.backtest.conditional import gated_policy
from clstm_ppo.backtest.rules import FixedRule, GatedRule
from clstm_ppo.config import Config
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.data.planted import planted_state
from clstm_ppo.env import ActionSpace

RICH = 0.0  # premium_t above this: the forecast marked up, so the put is dear
GATE = "true_premium_rich"


def oracle_rule(actions: ActionSpace) -> FixedRule:
    """Sell the chain's put nearest 0.95 x 30 days into every free slot."""
    m = min(range(len(actions.moneyness)), key=lambda i: abs(actions.moneyness[i] - 0.95))
    e = min(range(len(actions.expiries_days)), key=lambda i: abs(actions.expiries_days[i] - 30))
    return FixedRule(None, actions.sell(False, m, e), every_slot=True)


def true_premium(data: MarketData, cfg: Config) -> np.ndarray:
    """(S, T) the hidden premium_t at each bar of ``data``, a dataset of the planted
    market of ``cfg.data``."""
    if cfg.data.source != "planted":
        raise ValueError(
            f"the oracle needs the planted market (data.source planted), not {cfg.data.source!r}"
        )
    premium = planted_state(cfg.data.planted, data.dates)["premium"].to_numpy()
    return np.tile(premium, (len(data.symbols), 1))


def oracle_policy(data: MarketData, cfg: Config, device: torch.device | str) -> tuple:
    """The oracle as a policy for one walk (``walk_together``'s layout)."""
    actions = ActionSpace.from_config(cfg.market)
    gates = {GATE: true_premium(data, cfg) > RICH}
    return gated_policy(
        [GatedRule(oracle_rule(actions), GATE)],
        gates,
        actions,
        len(data.symbols),
        cfg.env.max_positions,
        device,
    )
