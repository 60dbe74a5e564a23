import pytest
import torch

from clstm_ppo.config import CostConfig, MarketConfig
from clstm_ppo.market import COST_KINDS, chain_strikes, order_fill, quoted_spread
from clstm_ppo.market.costs import Ticks, order_fill_at

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


SPX = Ticks(0.05, 0.10, 3.0)  # Cboe's grid for SPX: nickels below $3, dimes from $3


@pytest.mark.parametrize("mid, half, bid, ask", [
    (0.10, 0.05, 0.05, 0.15),  # a ten-cent option with a 10% spread: bid a nickel, ask 15 cents
    (0.01, 0.05, 0.00, 0.05),  # worth under a tick: no bid, a one-tick ask
    (0.0, 0.05, 0.00, 0.05),   # worth nothing: still no one sells it for less than a tick
    (2.99, 0.01, 2.95, 3.10),  # the bid on the nickel grid, the ask ($3.02) on the dime grid
    (24.53, 0.015, 24.10, 24.90),
    (5.00, 0.00, 5.00, 5.00),  # a quote on the grid stays there
])
def test_quotes_round_out_to_the_tick_grid(mid, half, bid, ask):
    """Bids round down and asks up to Cboe's SPX grid; with a large volume (no slippage) the fill is the quote and
    the spread paid is the distance from mid."""
    cfg = CostConfig()
    sell = order_fill_at(T(mid), T(3.0), True, T(half), T(1e12), cfg, 100, SPX)
    buy = order_fill_at(T(mid), T(3.0), False, T(half), T(1e12), cfg, 100, SPX)
    assert sell.price.item() == pytest.approx(bid, abs=1e-9) and buy.price.item() == pytest.approx(ask, abs=1e-9)
    assert sell.costs[0].item() == pytest.approx((mid - bid) * 300, abs=1e-7)
    assert buy.costs[0].item() == pytest.approx((ask - mid) * 300, abs=1e-7)


def test_a_fill_on_the_grid_accounts_for_every_cent_and_never_sells_below_zero():
    """Price = mid + spread paid + slippage paid for a buy, mid less both for a sale, whatever the grid does;
    slippage is charged from the quote, and a sale of an option bid at 0 fills at 0 (it pays what it can)."""
    gen = torch.Generator().manual_seed(0)
    mid = torch.cat([torch.rand(500, generator=gen, dtype=torch.float64) * 0.2,
                     torch.rand(500, generator=gen, dtype=torch.float64) * 60])
    half = 0.01 + torch.rand(1000, generator=gen, dtype=torch.float64) * 0.04
    contracts = torch.randint(1, 50, (1000,), generator=gen).double()
    volume = torch.full((1000,), 60.0, dtype=torch.float64)  # slippage of up to the 5% cap
    cfg = CostConfig()
    for sell in (True, False):
        fill = order_fill_at(mid, contracts, sell, half, volume, cfg, 100, SPX)
        direction = -1.0 if sell else 1.0
        per_share = (fill.costs[0] + fill.costs[1]) / (contracts * 100)
        torch.testing.assert_close(fill.price, mid + direction * per_share, rtol=0, atol=1e-12)
        assert (fill.costs[:2] >= -1e-12).all() and (fill.price >= 0).all()
        quote = fill.price - direction * fill.costs[1] / (contracts * 100)
        tick = torch.where(mid * (1 + direction * half) < 3.0, T(0.05), T(0.10))
        steps = quote / tick
        assert ((steps - steps.round()).abs() < 1e-9).all(), "every quote on the grid"
        assert ((quote - mid * (1 + direction * half)) * direction < tick + 1e-12).all(), "rounded by under a tick"
    assert (order_fill_at(mid, contracts, True, half, volume, cfg, 100, SPX).price[mid < 0.04] == 0).all()


def test_without_a_grid_the_fill_is_the_one_before_it():
    """ticks None (every increment 0) prices a fill bit for bit as the model without a grid did: mid times one
    plus or minus half spread and slippage."""
    mid, n, half, volume = T(4.2, 0.07), T(7.0, 900.0), T(0.02, 0.05), T(120.0, 40.0)
    for sell in (True, False):
        fill = order_fill_at(mid, n, sell, half, volume, CostConfig(), 100)
        impact = (CostConfig().slippage_coef * n / volume).clamp(max=CostConfig().max_slippage)
        assert torch.equal(fill.price, mid * (1.0 + (-1.0 if sell else 1.0) * (half + impact)))
        assert torch.equal(fill.costs[0], mid * half * (n * 100))
