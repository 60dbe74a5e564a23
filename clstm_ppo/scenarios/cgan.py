"""The regime-conditioned GAN: WGAN-GP whose generator and critic also read each bar's regime label.

A bar's label (regime_labels.py) depends on the window's returns up to and including the bar; the
bar's state (coding.py: the filter's variance, the iv premium, the previous bar) does not carry the
window, so the label tells the generator the regime. Sampling with one regime feeds that label at
every bar and holds it by rejection among the generator's proposals (sampling.py): a ``crash`` path
is one long crash, its volatility raised by the filter's recursion from the falls the generator
draws (docs/SCENARIOS.md). Without one, each bar's regime follows the training split's
regime-to-regime transition frequencies from the previous bar's own label
(FittedGenerator.sample_features).
"""

from __future__ import annotations

import torch

from clstm_ppo.scenarios.regime_labels import REGIMES
from clstm_ppo.scenarios.wgan_gp import WganGp, WganSettings


class CGan(WganGp):
    kind = "cgan"

    def __init__(self, n_features: int, n_cond: int, settings: WganSettings, device: torch.device):
        super().__init__(n_features, n_cond, settings, device, n_labels=len(REGIMES))
