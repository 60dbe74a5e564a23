import pytest
import torch

from clstm_ppo.config import CostConfig, MarketConfig
from clstm_ppo.market import COST_KINDS, chain_strikes, order_fill, quoted_spread

T = lambda *v: torch.tensor(v if len(v) > 1 else v[0], dtype=torch.float64)


def test_fees_are_itemised_per_contract_and_order():
    cfg = CostConfig()
    buy = order_fill(T(2.0), T(10.0), False, T(0.2), T(0.0), T(1e9), cfg, 100)
    costs = dict(zip(COST_KINDS, buy.costs.tolist(), strict=True))
    assert costs["commission"] == pytest.approx(6.50)
    assert costs["occ_clearing"] == pytest.approx(0.25)
    assert costs["orf"] == pytest.approx(0.20)
    assert costs["finra_taf"] == 0.0 and costs["sec_fee"] == 0.0  # both only on sales
    assert costs["spread"] == pytest.approx(2.0 * 0.015 * 1000)  # half of a 3% spread on $2,000 of premium
    sell = order_fill(T(0.5), T(1.0), True, T(0.2), T(0.0), T(1e9), cfg, 100)
    costs = dict(zip(COST_KINDS, sell.costs.tolist(), strict=True))
    assert costs["commission"] == pytest.approx(1.00)  # the per-order minimum
    assert costs["finra_taf"] == pytest.approx(0.00279)
    proceeds = sell.price.item() * 100
    assert costs["sec_fee"] == pytest.approx(proceeds * 27.80 / 1e6)
    assert sell.total.item() == pytest.approx(sum(costs.values()))
    nothing = order_fill(T(3.0), T(0.0), True, T(0.2), T(0.0), T(100.0), cfg, 100)
    assert nothing.total.item() == 0.0


def test_round_trip_at_unchanged_mid_loses_exactly_the_itemised_costs():
    cfg = CostConfig()
    mid, n, iv, log_m, volume = T(4.2), T(7.0), T(0.3), T(0.05), T(120.0)
    buy = order_fill(mid, n, False, iv, log_m, volume, cfg, 100)
    sell = order_fill(mid, n, True, iv, log_m, volume, cfg, 100)
    paid = buy.price * n * 100 + buy.costs[..., 2:].sum()
    received = sell.price * n * 100 - sell.costs[..., 2:].sum()
    assert (paid - received).item() == pytest.approx((buy.total + sell.total).item(), rel=1e-12)
    spread = quoted_spread(mid, iv, log_m, cfg)
    assert (buy.costs[0] + sell.costs[0]).item() == pytest.approx((spread * mid * n * 100).item())  # counted once


def test_spread_is_clamped_and_wider_where_it_should_be():
    cfg = CostConfig()
    base = quoted_spread(T(10.0), T(0.2), T(0.0), cfg).item()
    assert base == pytest.approx(cfg.spread_base)
    assert quoted_spread(T(0.3), T(0.2), T(0.0), cfg).item() > base  # cheap
    assert quoted_spread(T(10.0), T(0.2), T(0.1), cfg).item() > base  # far from the money
    assert quoted_spread(T(10.0), T(0.6), T(0.0), cfg).item() > base  # high vol
    extreme = quoted_spread(T(0.01, 50.0), T(3.0, 0.2), T(1.0, 0.0), CostConfig(spread_base=0.01))
    assert extreme.tolist() == pytest.approx([cfg.spread_max, cfg.spread_min])


def test_slippage_grows_with_order_size_against_option_volume():
    cfg = CostConfig()
    small = order_fill(T(5.0), T(1.0), False, T(0.2), T(0.0), T(100.0), cfg, 100)
    large = order_fill(T(5.0), T(5.0), False, T(0.2), T(0.0), T(100.0), cfg, 100)
    assert large.costs[1] / 5 > small.costs[1]
    capped = order_fill(T(5.0), T(1000.0), False, T(0.2), T(0.0), T(100.0), cfg, 100)
    assert capped.costs[1].item() == pytest.approx(5.0 * cfg.max_slippage * 1000 * 100)


def test_chain_strikes_round_to_the_strike_step():
    spot = T(1234.0, 87.3)
    strikes = chain_strikes(spot, T(0.95, 0.95), MarketConfig())
    assert strikes.tolist() == [1170.0, 83.0]  # steps 5.0 (0.5% of 1234 -> 5) and 0.25 (of 87.3: 0.436 -> 0.25)
    fixed = chain_strikes(spot, T(1.05, 1.05), MarketConfig(strike_step=10.0))
    assert fixed.tolist() == [1300.0, 90.0]
