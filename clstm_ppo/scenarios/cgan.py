"""The regime-conditioned GAN: WGAN-GP whose generator and critic read the regime label of every bar.

Labels come from the training split's trailing return and volatility (regimes.py); sampling with one regime
feeds that label at every bar, so a ``crash`` path is one long run of what the crash windows looked like.
"""
from __future__ import annotations

import torch

from clstm_ppo.scenarios.regimes import REGIMES
from clstm_ppo.scenarios.wgan_gp import WganGp, WganSettings


class CGan(WganGp):
    kind = "cgan"

    def __init__(self, n_features: int, settings: WganSettings, device: torch.device):
        super().__init__(n_features, settings, device, n_labels=len(REGIMES))
