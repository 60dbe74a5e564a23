"""The settings of the two generated markets, ``data.synthetic`` and ``data.planted``
(docs/ENVIRONMENT.md): each defined once, default, help and allowed values side by side, as
in ``sections.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from clstm_ppo.config.fields import Section, setting


@dataclass
class SyntheticConfig(Section):
    """Seeded GBM market with Markov regime switching and Poisson jumps (the generator
    checks its own values)."""

    path: ClassVar[str] = "data.synthetic"
    n_bars: int = setting(5000, "bars per underlying")
    n_underlyings: int = setting(1, "underlyings, driven by one common factor")
    seed: int = setting(0, "the generator's seed")
    start_date: str = setting("2000-01-03", "date of the first bar")
    interval: str = setting(
        "1D", "bar interval, a pandas frequency up to a day: 1D, 1h, 15min, 5min"
    )
    hours: str = setting(
        "exchange",
        "when the market trades: exchange (weekdays; intraday 09:30-16:00), 24/5 (FX: "
        "Sunday 22:00 to Friday 22:00) or 24/7 (crypto)",
        choices=("exchange", "24/5", "24/7"),
    )
    initial_price: float = setting(100.0, "price of the first bar")
    regime_drift: list[float] = setting([0.10, -0.15], "annualised drift, one per regime")
    regime_vol: list[float] = setting([0.12, 0.35], "annualised vol, one per regime")
    regime_switch_prob: float = setting(0.01, "chance per bar of leaving the current regime")
    correlation: float = setting(0.6, "loading on the common factor when n_underlyings > 1")
    jumps_per_year: float = setting(4.0, "Poisson rate of jumps")
    jump_mean: float = setting(-0.02, "mean log jump size")
    jump_std: float = setting(0.04, "std of the log jump size")
    base_volume: float = setting(
        1.0e8, "shares a bar: a liquid name, so the option-volume cap rarely binds"
    )
    signal_strength: float = setting(
        0.0, ">0 plants a learnable next-bar signal in the volume (tests use it)"
    )
    iv_premium: float = setting(
        1.25, "the iv column: the regime's true vol x this (a variance risk premium, like VIX's)"
    )


@dataclass
class PlantedConfig(Section):
    """A synthetic index whose implied vol carries a variance risk premium that moves with a hidden
    AR(1) state: a market with a known option-selling edge (docs/PLANTED.md)."""

    path: ClassVar[str] = "data.planted"
    years: float = setting(
        66.0,
        "years of daily bars (252 a year): one warm-up year, then 20 train, 5 validation "
        "and 40 test years by default",
        limits=">= 2",
    )
    train_years: float = setting(
        20.0,
        "years of the training split after the warm-up year (data.train_end overrides)",
        limits="> 0",
    )
    val_years: float = setting(
        5.0, "years of the validation split; the test split is what follows", limits="> 0"
    )
    seed: int = setting(0, "the generator's seed")
    start_date: str = setting(
        "1990-01-02",
        "date of the first bar; bars fall on US exchange days (weekdays less federal holidays)",
    )
    initial_price: float = setting(
        1000.0,
        "index level of the first bar (SPX-like: index option ticks and margin)",
        limits="> 0",
    )
    rate: float = setting(
        0.02, "the T-bill rate column, continuously compounded", limits="(-0.5, 0.5)"
    )
    equity_premium: float = setting(
        0.0,
        "the index's expected annual return over the T-bill (0: holding it earns "
        "nothing, so no rule gains by owning the market)",
        limits="(-1, 1)",
    )
    vol: float = setting(
        0.16,
        "long-run annualised volatility of the index's returns, jumps included",
        limits="(0, 2)",
    )
    garch_alpha: float = setting(
        0.06, "GARCH(1,1) weight of the last squared diffusive shock", limits="[0, 1)"
    )
    garch_leverage: float = setting(
        0.0,
        "GJR-GARCH's extra weight of the last squared shock when it was a fall",
        limits="[0, 1)",
    )
    garch_beta: float = setting(
        0.92,
        "GARCH(1,1) weight of the last variance (alpha + leverage / 2 + beta < 1)",
        limits="[0, 1)",
    )
    jumps_per_year: float = setting(
        0.0,
        "Poisson rate of jumps (0: none, so the planted config's flat surface "
        "prices the chain fairly; jumps make the put wing dear)",
        limits=">= 0",
    )
    jump_mean: float = setting(
        -0.05,
        "mean log jump at the long-run vol (jumps scale with the vol level)",
        limits="(-1, 1)",
    )
    jump_std: float = setting(0.03, "std of the log jump at the long-run vol", limits=">= 0")
    premium_mean: float = setting(
        -0.5,
        "mean of premium_t: iv = the market's own 30-day vol forecast x (1 + premium_t)",
        limits="(-0.9, 5)",
    )
    premium_swing: float = setting(
        0.8, "stationary std of premium_t (0: a constant premium, nothing to time)", limits=">= 0"
    )
    premium_floor: float = setting(
        0.0,
        "the implied vol's markup never falls below 1 + this (0: while premium_t < 0 "
        "options are fair, so either side pays only its costs; below 0 bought options "
        "gain while cheap, an edge the sell-only oracle does not bound)",
        limits="(-1, 0]",
    )
    premium_persistence: float = setting(
        0.99,
        "AR(1) coefficient of premium_t per bar (0.99: a half-life of 69 bars)",
        limits="[0, 1)",
    )
    base_volume: float = setting(
        2.0e9,
        "index shares a bar (the S&P 500's magnitude); rises with the vol level, "
        "never with premium_t",
        limits="> 0",
    )
