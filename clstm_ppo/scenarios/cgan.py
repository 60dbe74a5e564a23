"""The regime-conditioned GAN: WGAN-GP whose generator and critic also read each bar's regime label.

A bar's label (regime_labels.py) depends on the window's returns up to and including the bar, and the bar's state
carries the sum and volatility of the window's other returns, so the generator learns which bars keep a path in its
regime.
Sampling with one regime feeds that label at every bar: a ``crash`` path is one long crash, its volatility raised by
the filter's recursion from the falls the generator draws. Without one, each bar's regime follows the training
split's regime-to-regime transition frequencies from the previous bar's own label (FittedGenerator.sample_features).
"""
from __future__ import annotations

import torch

from clstm_ppo.scenarios.regime_labels import REGIMES
from clstm_ppo.scenarios.wgan_gp import WganGp, WganSettings


class CGan(WganGp):
    kind = "cgan"

    def __init__(self, n_features: int, n_cond: int, settings: WganSettings, device: torch.device):
        super().__init__(n_features, n_cond, settings, device, n_labels=len(REGIMES))
