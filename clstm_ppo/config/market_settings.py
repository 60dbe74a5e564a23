"""The option market's settings: fees and spreads (``market.costs``), then pricing, the
surface, margin and sizing (``market``); docs/MARKET.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from clstm_ppo.config.fields import Section, section, setting


@dataclass
class CostConfig(Section):
    """Fees per contract (US listed options, 2024 levels) and the quoted-spread
    and slippage model."""

    path: ClassVar[str] = "market.costs"
    commission_per_contract: float = setting(
        0.65, "typical US retail broker (e.g. Interactive Brokers' tiered rate)", limits=">= 0"
    )
    commission_min_per_order: float = setting(
        1.00, "the same brokers' per-order minimum", limits=">= 0"
    )
    occ_clearing_per_contract: float = setting(0.025, "OCC clearing fee, both sides", limits=">= 0")
    finra_taf_per_contract: float = setting(
        0.00279, "FINRA Trading Activity Fee, sells only", limits=">= 0"
    )
    sec_fee_per_million: float = setting(
        27.80,
        "SEC Section 31 fee on sale proceeds; the rate is reset every fiscal year",
        limits=">= 0",
    )
    orf_per_contract: float = setting(
        0.02, "options regulatory fee (exchange-set, about $0.02), both sides", limits=">= 0"
    )
    spread_base: float = setting(
        0.03, "quoted spread as a share of mid for a liquid at-the-money option", limits="[0, 1]"
    )
    spread_min: float = setting(
        0.02, "the spread is clamped to [spread_min, spread_max] of mid", limits="[0, 1]"
    )
    spread_max: float = setting(
        0.10, "the spread is clamped to [spread_min, spread_max] of mid", limits="[0, 1]"
    )
    spread_cheap_price: float = setting(
        2.0, "options with mid (per share) below this quote wider ...", limits=">= 0"
    )
    spread_cheap_coef: float = setting(1.0, "... by up to this factor", limits=">= 0")
    spread_moneyness_coef: float = setting(
        5.0, "wider by this factor per unit |ln(K/S)|", limits=">= 0"
    )
    spread_vol_coef: float = setting(
        1.0, "wider by this factor per unit of implied vol above 20%", limits=">= 0"
    )
    # Listed options quote on a price grid (Cboe): index options such as SPX in $0.05 below $3 and
    # $0.10 at and above; stocks in the Penny Interval Program (every Dow name here) in $0.01 and
    # $0.05. The ask rounds up and the bid down, so a quote is at least one tick wide and an option
    # worth under a tick bids 0. Which grid an underlying gets follows market.margin_style. Runs
    # saved before 2026-11-27 had no grid ([0, 0]).
    index_ticks: list[float] = setting(
        [0.05, 0.10],
        "quote increments of index options below / at and above "
        "tick_break dollars a share; [0, 0]: no grid",
        limits=">= 0",
    )
    stock_ticks: list[float] = setting(
        [0.01, 0.05],
        "quote increments of single-stock options below / at and above tick_break; [0, 0]: no grid",
        limits=">= 0",
    )
    tick_break: float = setting(
        3.0, "the quote (per share) from which the larger tick applies", limits="> 0"
    )
    slippage_coef: float = setting(
        0.5, "price impact share of mid per (order contracts / option volume)", limits=">= 0"
    )
    max_slippage: float = setting(0.05, "impact is capped at this share of mid", limits="[0, 1)")
    # Option-volume proxy of one strike (docs/MARKET.md): underlying volume x ratio at the money at
    # <= 30 days, less for far strikes and long expiries. 1e-4 puts a Dow stock's ATM strike at
    # 1,000-3,000 contracts a day (10-30M shares); the S&P 500's volume column sums its members'
    # shares, so it overstates SPX strikes ~30x.
    option_volume_ratio: float = setting(
        1.0e-4, "ATM option contracts a day per share of underlying volume", limits=">= 0"
    )
    volume_moneyness_width: float = setting(
        0.10,
        "volume falls by e per this |ln(K/S)| (0.90 and 1.10 strikes: 37% of ATM)",
        limits="> 0",
    )
    volume_expiry_power: float = setting(
        1.0, "... and as (30 days / T) ^ power beyond 30 days", limits=">= 0"
    )
    min_option_volume: float = setting(
        50.0, "option-volume proxy floor (and its value without a volume column)", limits="> 0"
    )
    max_volume_share: float = setting(
        0.10,
        "an opening order takes at most this share of its strike's volume proxy",
        limits="(0, 1]",
    )
    share_cost_bps: float = setting(
        1.0,
        "trading the underlying (an index fund, a liquid stock): spread + "
        "commission, in basis points",
        limits=">= 0",
    )


@dataclass
class MarketConfig(Section):
    path: ClassVar[str] = "market"
    # Used only where the data has no rate series (the embedded S&P 500 has the 3-month T-bill; a
    # file may carry a `rate` column).
    risk_free_rate: float = setting(
        0.02, "r, continuously compounded, where the data has no rate series", limits="(-1, 1)"
    )  # negative rates do occur
    dividend_yield: float = setting(
        0.015,
        "q for prices without dividends in them (0 where Adj Close was applied)",
        limits="(-1, 1)",
    )
    iv_source: str = setting(
        "auto",
        "implied vol (docs/MARKET.md): auto = the data's iv/vix column if "
        "it has one, else the model; model ignores any iv column",
        choices=("auto", "column", "model"),
    )
    # The VIX is a variance-swap rate that sits above ATM vol by about the skew's share.
    # 0.89: fitted on the training years only (S&P 500 with VIX, 2000-2012), the grid
    # 0.80..1.05 minimising the simulated CBOE PutWrite/BuyWrite's mean absolute difference
    # from the real PUT/BXM annual returns (python scripts/studies/cboe_benchmarks.py
    # --calibrate; docs/MARKET.md section 5).
    atm_per_iv: float = setting(
        0.89,
        "30-day ATM vol = this x the data's iv column (or the model); 1.0 for a "
        "column that already holds ATM vol",
        limits="(0, 2]",
    )
    ewma_lambda: float = setting(
        0.94,
        "the model's volatility estimate: RiskMetrics' daily EWMA decay, per bar "
        "(annualised at the data's bars a year)",
        limits="(0, 1)",
    )
    leverage_lambda: float = setting(
        0.90,
        "decay per bar of the EWMA of signed returns in the model's leverage term",
        limits="(0, 1)",
    )
    # Fitted on the S&P 500 with VIX, training split 2000-2012 only
    # (scripts/studies/fit_iv_model.py reproduces these).
    iv_model_coefs: list[float] = setting(
        [-0.3277, 0.6994, -1.4935],
        "log IV = a + b log(sigma_ewma) + c leverage",
        limits="(-100, 100)",
    )
    # iv(K, T) = atm(T) - skew z + iv_smile z^2, z = ln(K/S) / sqrt(T / 30 days) clipped to
    # +-iv_wing_z, skew = iv_skew below the money and iv_call_skew above it: the 0.95 strike
    # ~6.2 vol points over the money at 30 days (SPX in calm markets, docs/MARKET.md: 5-8
    # points), the 1.05 strike ~2.0 under (the index's call wing is flatter than its put
    # wing: 1-3 points at 5% out of the money); flat beyond the wing so far strikes stay
    # below ~ATM + 30 points. Set by hand: no option-chain data ships here. Until 2026-11-27
    # one skew served both sides (iv_call_skew 1.1), which put the 1.05 call 4.9 points under
    # the money at any level: under half of ATM vol in calm markets, where buying it then won
    # on average (docs/MARKET.md section 2).
    iv_skew: float = setting(
        1.1,
        "the surface's skew at and below the money (puts' wing; vol per unit of scaled "
        "log-moneyness)",
        limits=">= 0",
    )
    iv_call_skew: float = setting(
        0.5,
        "the skew above the money (calls' wing; 1.1 is the surface of the grids before 2026-11-27)",
        limits=">= 0",
    )
    iv_smile: float = setting(2.0, "the surface's smile (curvature)", limits=">= 0")
    iv_wing_z: float = setting(
        0.2, "scaled log-moneyness beyond which the surface is flat", limits="> 0"
    )
    term_reversion: float = setting(
        4.0,
        "kappa per year: ATM variance reverts to the training median (0: flat term)",
        limits=">= 0",
    )
    min_iv: float = setting(0.03, "lowest implied vol of any strike", limits="> 0")
    max_iv: float = setting(2.00, "highest implied vol of any strike", limits="> 0")
    allow_short: bool = setting(True, "sell-to-open calls and puts, under margin")
    stock_targets: list[float] = setting(
        [0.0, 0.5, 1.0], "underlying exposures the agent may target, x equity", limits="[0, 1]"
    )
    # Short option margin per share (Cboe/FINRA): max(premium + a x spot - out-of-the-money
    # amount, premium + b x (strike for puts, spot for calls)); [a, b] for broad-based
    # indices and for single stocks.
    margin_style: str = setting(
        "auto",
        "auto: index rules (margin rates, quote ticks) for the built-in indices "
        "(sp500, synthetic), stock rules for single stocks (dow) and files",
        choices=("auto", "index", "stock"),
    )
    index_margin: list[float] = setting(
        [0.15, 0.10], "[a, b] margin rates for broad-based indices", limits="[0, 1]"
    )
    stock_margin: list[float] = setting(
        [0.20, 0.10], "[a, b] margin rates for single stocks", limits="[0, 1]"
    )
    moneyness: list[float] = setting([0.95, 1.00, 1.05], "strike / spot of the chain", limits="> 0")
    expiries_days: list[int] = setting([30, 60], "calendar days to expiry", limits=">= 1")
    strike_step: float = setting(
        0.0,
        "strikes round to this; 0: the largest of 0.01, 0.05, ..., 100 below 0.5% of spot",
        limits=">= 0",
    )
    multiplier: int = setting(100, "shares per contract", limits=">= 1")
    # Whole contracts make returns depend on the price level and the account: one S&P 500 contract
    # at 12,500 needs ~$190k of margin, over position_frac of a $1M account, so every sale is
    # masked (docs/MARKET.md, "Sizing"). Fractional orders, as the PutWrite/BuyWrite replicas
    # hold, keep every return scale-free.
    sizing: str = setting(
        "fractional",
        "order sizes: fractional (contracts and shares of any size, as "
        "position_frac x equity gives them: returns do not depend on the price level "
        "or the account's size) or whole (whole contracts and shares, floored; the "
        "market before fractional sizing)",
        choices=("fractional", "whole"),
    )
    costs: CostConfig = section(CostConfig, "fees, spreads, slippage and the volume cap")
