"""Market scenarios from generative models (SPEC section 11): WGAN-GP, a regime-conditioned GAN and TimeGAN,
fitted on the training split, sampled into OHLCV(+iv) tables the data loader reads, and judged beside
GARCH(1,1)-t and a stationary block bootstrap."""
from clstm_ppo.scenarios.generator import MODELS, FittedGenerator, load_generator
from clstm_ppo.scenarios.regimes import REGIMES

__all__ = ["MODELS", "REGIMES", "FittedGenerator", "load_generator"]
