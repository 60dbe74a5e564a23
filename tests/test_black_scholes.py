import math

import pytest
import torch

from clstm_ppo.market import bs_call_put, bs_greeks, bs_price


def textbook_call(s, k, t, r, q, sigma):
    """Black-Scholes-Merton from math.erf: an implementation independent of the package's torch one."""
    n = lambda x: 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
    d1 = (math.log(s / k) + (r - q + 0.5 * sigma**2) * t) / (sigma * math.sqrt(t))
    d2 = d1 - sigma * math.sqrt(t)
    return s * math.exp(-q * t) * n(d1) - k * math.exp(-r * t) * n(d2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_textbook_values(dtype):
    args = [torch.tensor([v], dtype=dtype) for v in (100.0, 100.0, 1.0)]
    sigma = torch.tensor([0.2], dtype=dtype)
    call = bs_price(*args, 0.05, 0.0, sigma, torch.tensor([True]))
    put = bs_price(*args, 0.05, 0.0, sigma, torch.tensor([False]))
    assert call.dtype == dtype
    assert call.item() == pytest.approx(10.4506, abs=1e-4)
    assert put.item() == pytest.approx(5.5735, abs=1e-4)


def test_matches_an_independent_implementation_with_dividends():
    for s, k, t, r, q, sigma in [(120, 100, 0.25, 0.03, 0.02, 0.35), (80, 100, 2.0, 0.01, 0.0, 0.15),
                                 (1500, 1425, 30 / 365, 0.02, 0.015, 0.18)]:
        call, put = bs_call_put(*(torch.tensor([float(v)], dtype=torch.float64) for v in (s, k, t)), r, q,
                                torch.tensor([sigma], dtype=torch.float64))
        want = textbook_call(s, k, t, r, q, sigma)
        assert call.item() == pytest.approx(want, rel=1e-10)
        assert put.item() == pytest.approx(want - s * math.exp(-q * t) + k * math.exp(-r * t), rel=1e-9)


def grid(dtype=torch.float64):
    s, k, t, sigma = torch.meshgrid(torch.tensor([80.0, 100.0, 125.0], dtype=dtype),
                                    torch.tensor([90.0, 100.0, 110.0], dtype=dtype),
                                    torch.tensor([0.02, 0.25, 1.5], dtype=dtype),
                                    torch.tensor([0.1, 0.3, 0.8], dtype=dtype), indexing="ij")
    return s.flatten(), k.flatten(), t.flatten(), sigma.flatten()


def test_put_call_parity_over_a_grid():
    s, k, t, sigma = grid()
    r, q = 0.04, 0.02
    call = bs_price(s, k, t, r, q, sigma, torch.ones_like(s, dtype=torch.bool))
    put = bs_price(s, k, t, r, q, sigma, torch.zeros_like(s, dtype=torch.bool))
    torch.testing.assert_close(call - put, s * torch.exp(-q * t) - k * torch.exp(-r * t), rtol=0, atol=1e-10)
    assert (call >= 0).all() and (put >= 0).all()


@pytest.mark.parametrize("is_call", [True, False])
def test_greeks_match_finite_differences(is_call):
    s, k, t, sigma = grid()
    r, q = 0.04, 0.02
    flag = torch.full_like(s, is_call, dtype=torch.bool)
    price = lambda s_=s, t_=t, v_=sigma: bs_price(s_, k, t_, r, q, v_, flag)
    g = bs_greeks(s, k, t, r, q, sigma, flag)
    torch.testing.assert_close(g.price, price())
    h = 1e-4
    torch.testing.assert_close(g.delta, (price(s + h) - price(s - h)) / (2 * h), rtol=1e-5, atol=1e-7)
    hs = 1e-2
    torch.testing.assert_close(g.gamma, (price(s + hs) - 2 * price() + price(s - hs)) / hs**2, rtol=1e-3, atol=1e-6)
    torch.testing.assert_close(g.vega, (price(v_=sigma + h) - price(v_=sigma - h)) / (2 * h), rtol=1e-5, atol=1e-6)
    # Theta: value change as calendar time passes, i.e. minus the derivative in time to expiry.
    torch.testing.assert_close(g.theta, -(price(t_=t + 1e-6) - price(t_=t - 1e-6)) / 2e-6, rtol=1e-4, atol=1e-4)


def test_expired_options_are_worth_intrinsic():
    s = torch.tensor([90.0, 110.0, 90.0, 110.0], dtype=torch.float64)
    k = torch.full_like(s, 100.0)
    call = torch.tensor([True, True, False, False])
    price = bs_price(s, k, torch.zeros_like(s), 0.05, 0.0, torch.full_like(s, 0.2), call)
    assert price.tolist() == [0.0, 10.0, 10.0, 0.0]


def test_a_mixed_batch_of_calls_and_puts_prices_each_as_alone():
    s, k, t, sigma = grid()
    r, q = 0.04, 0.02
    mixed = torch.arange(s.numel()) % 3 == 0  # calls and puts interleaved, as in the env's position slots
    g = bs_greeks(s, k, t, r, q, sigma, mixed)
    for flag in (True, False):
        alone = bs_greeks(s, k, t, r, q, sigma, torch.full_like(mixed, flag))
        rows = mixed == flag
        for got, want in zip(g, alone, strict=True):
            torch.testing.assert_close(got[rows], want[rows], rtol=0, atol=1e-12)
    expired = torch.zeros_like(t)
    torch.testing.assert_close(bs_price(s, k, expired, r, q, sigma, mixed),
                               torch.where(mixed, s - k, k - s).clamp_min(0), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mask_arithmetic_matches_torch_where(dtype):
    from clstm_ppo.market.flags import as_float, call_sign, choose

    gen = torch.Generator().manual_seed(0)
    mask = torch.rand(5, 64, generator=gen) < 0.4
    a = torch.randn(5, 64, generator=gen, dtype=dtype) * 1e6
    b = torch.randn(64, generator=gen, dtype=dtype)  # broadcast over the first dim, as slots over copies
    assert torch.equal(choose(mask, a, b.expand_as(a)), torch.where(mask, a, b))
    assert torch.equal(as_float(mask, dtype), mask.to(dtype))
    assert torch.equal(call_sign(mask, dtype), torch.where(mask, 1.0, -1.0).to(dtype))
