"""Market scenarios from generative models (docs/SCENARIOS.md): WGAN-GP, a regime-conditioned GAN
and TimeGAN, learning the residuals of a volatility filter fitted on the training split, sampled
into OHLCV(+iv) tables the data loader reads, and judged beside GARCH(1,1)-t, a stationary block
bootstrap and filtered historical simulation."""

from clstm_ppo.scenarios.generator import MODELS, FittedGenerator, load_generator
from clstm_ppo.scenarios.regime_labels import REGIMES

__all__ = ["MODELS", "REGIMES", "FittedGenerator", "load_generator"]
