"""Option market: Black-Scholes pricing and Greeks, the chain, the implied-vol surface and its
inputs, and itemised trading costs."""

from clstm_ppo.market.black_scholes import Greeks, bs_call_put, bs_greeks, bs_price
from clstm_ppo.market.chain import chain_strikes, strike_step
from clstm_ppo.market.costs import COST_KINDS, Fill, closing_fee_reserve, order_fill, quoted_spread
from clstm_ppo.market.volatility import surface_iv

__all__ = [
    "COST_KINDS",
    "Fill",
    "Greeks",
    "bs_call_put",
    "bs_greeks",
    "bs_price",
    "chain_strikes",
    "closing_fee_reserve",
    "order_fill",
    "quoted_spread",
    "strike_step",
    "surface_iv",
]
