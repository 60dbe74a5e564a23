"""Short options, margin, the underlying and the carry of cash, scenario by scenario (docs/MARKET.md section 1).

The hand-made markets (tests/market_fixtures.py) open every bar at the previous close: each open is stale, so
every order fills at its bar's close, where it is also marked. Their implied vol is flat (0.2 x atm_per_iv at
every strike once the skew and smile are off, and at every maturity: the long-run vol is the same), the rate is
market.risk_free_rate and the dividend yield market.dividend_yield; they are no broad-based index, so shorts
margin at stock rates.
"""
import dataclasses
import math

import numpy as np
import pytest
import torch
from env_trajectory import random_valid
from market_fixtures import handmade_market
from reference_env import black_scholes

from clstm_ppo.backtest.policies import cash_policy
from clstm_ppo.backtest.walk import buy_and_hold, walk
from clstm_ppo.config import Config, DataConfig, EnvConfig, MarketConfig, SyntheticConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.env.actions import ActionSpace
from clstm_ppo.market import COST_KINDS
from clstm_ppo.market.inputs import market_inputs

FLAT = MarketConfig(iv_skew=0.0, iv_call_skew=0.0, iv_smile=0.0)
VOL = 0.2 * FLAT.atm_per_iv
R, Q = FLAT.risk_free_rate, FLAT.dividend_yield
DAY = math.exp(R / 365)  # a daily bar's carry on cash
STOCK_A, STOCK_B = FLAT.stock_margin


def hand_env(close: np.ndarray, market: MarketConfig = FLAT, **account) -> BatchedOptionsEnv:
    """One copy on hand-made daily bars from bar 2 to the last, nothing ending it early."""
    env_cfg = EnvConfig(dtype="float64", episode_length=0, ruin_fraction=0.0, **account)
    env = BatchedOptionsEnv(handmade_market(close), "train", market, env_cfg, 1, seed=0, autoreset=False)
    env.reset()
    return env


def step(env: BatchedOptionsEnv, action: int):
    return env.step(torch.tensor([action]))


def put_mid(spot: float, strike: float, days: float) -> float:
    return black_scholes(spot, strike, days / 365, R, Q, VOL, call=False)


@pytest.mark.parametrize("ending", ["out of the money", "in the money"])
def test_a_short_put_held_to_expiry_keeps_its_premium_less_costs_or_pays_its_intrinsic_value(ending):
    """A 30-day put struck at 95 is sold at bar 3's close (spot 100) and held: it expires at bar 33's close. Out
    of the money (spot 100) the account keeps the premium less every cost, and the interest on both; in the money
    (spot 90) it also pays 5 a share at the close, without fees."""
    final = 100.0 if ending == "out of the money" else 90.0
    close = np.concatenate([np.full(5, 100.0), np.linspace(100.0, final, 29), np.full(8, final)])
    env = hand_env(close)
    sell = env.actions.sell(is_call=False, moneyness_index=0, expiry_index=0)
    assert env.action_mask()[0, sell]
    step(env, sell)  # fills at bar 3's close
    assert env.t.item() == 3 and env.active[0, 0] and env.short[0, 0] and env.strike[0, 0] == 95.0
    assert env.expiry_bar[0, 0] == 33
    contracts, premium = env.contracts[0, 0].item(), env.entry_cost[0, 0].item()
    mid = put_mid(100.0, 95.0, 30)
    costs = env.costs_paid[:, 0].sum().item()
    assert -premium == pytest.approx(mid * contracts * 100 - costs, rel=1e-12)  # the bid, less the fees
    assert env.costs_paid[COST_KINDS.index("finra_taf"), 0] > 0  # a sale pays the TAF and the SEC fee
    # Sized by its margin at stock rates: position_frac of equity in max(premium + a S - OTM, premium + b K).
    margin = mid + max(STOCK_A * 100.0 - 5.0, STOCK_B * 95.0)
    assert contracts == pytest.approx(EnvConfig().position_frac * 1e6 / (margin * 100), rel=1e-12)  # fractional
    assert env.margin.item() == pytest.approx(margin * contracts * 100, rel=1e-12)
    assert env.mark[0, 0].item() == pytest.approx(-mid * contracts * 100, rel=1e-12)  # owed at mid
    assert env.equity.item() == pytest.approx(env.cash.item() - mid * contracts * 100, rel=1e-12)
    cash = env.cash.item()
    assert cash == pytest.approx(1e6 * DAY - premium, rel=1e-12)
    for _ in range(29):
        step(env, 0)
    assert env.t.item() == 32 and env.active[0, 0] and env.stats["margin_calls"].item() == 0
    cash *= DAY ** 29
    assert env.cash.item() == pytest.approx(cash, rel=1e-12)
    step(env, 0)  # bar 33: it settles at its close
    assert not env.active.any() and env.stats["closed"].item() == 1
    assert env.costs_paid[:, 0].sum().item() == pytest.approx(costs, rel=1e-12)  # settling costs nothing
    intrinsic = max(95.0 - close[33], 0.0) * contracts * 100
    assert env.cash.item() == pytest.approx(cash * DAY - intrinsic, rel=1e-12)
    assert env.equity.item() == env.cash.item() and env.margin.item() == 0.0
    # out of the money: the initial cash and the premium less costs, each with 31 days' interest, and a win
    kept = 1e6 * DAY ** 31 + (mid * contracts * 100 - costs) * DAY ** 30
    if ending == "out of the money":
        assert env.cash.item() == pytest.approx(kept, rel=1e-12) and env.stats["wins"].item() == 1
    else:
        assert intrinsic == pytest.approx(5.0 * contracts * 100) and env.stats["wins"].item() == 0


def test_a_margin_call_buys_every_short_back_at_the_next_fill_and_is_counted():
    """A $20,000 account sells puts at 100 (30 days) and at 95 (60 days) with half its equity in margin each, as
    far as its cash room goes, then buys calls at 105 with the rest. Bar 6 closes at 95: the shorts' margin (stock
    rates) now exceeds the cash, so nothing may open, and at bar 7's fill both puts are bought back at the ask
    while the calls are kept; one margin call is counted, in the step's stats and in the episode's."""
    close = np.concatenate([np.full(6, 100.0), np.full(4, 95.0)])
    env = hand_env(close, initial_cash=20_000.0, position_frac=0.5)
    a = env.actions
    step(env, a.sell(is_call=False, moneyness_index=1, expiry_index=0))  # bar 3
    step(env, a.sell(is_call=False, moneyness_index=0, expiry_index=1))  # bar 4
    step(env, a.buy(is_call=True, moneyness_index=2, expiry_index=0))  # bar 5
    assert env.active[:3, 0].tolist() == [True, True, True] and env.short[:3, 0].tolist() == [True, True, False]
    assert env.strike[:3, 0].tolist() == [100.0, 95.0, 105.0]
    assert env.cash.item() >= env.margin.item()
    step(env, a.hold)  # bar 6 closes at 95
    assert env.cash.item() < env.margin.item() and env.stats["margin_calls"].item() == 0
    assert not env.action_mask()[0, 1:1 + a.option_orders].any(), "nothing opens while the margin is uncovered"
    contracts = env.contracts[:3, 0].tolist()
    cash, costs = env.cash.item(), env.costs_paid[:, 0].clone()
    result = step(env, a.hold)  # bar 7: the margin call
    assert env.stats["margin_calls"].item() == 1 and env.stats["closed"].item() == 2
    assert env.active[:3, 0].tolist() == [False, False, True], "the long calls stay"
    assert env.contracts[2, 0].item() == contracts[2]
    paid = env.costs_paid[:, 0] - costs
    assert paid[COST_KINDS.index("finra_taf")] == 0 and paid[COST_KINDS.index("sec_fee")] == 0  # purchases
    assert paid[COST_KINDS.index("spread")] > 0 and paid[COST_KINDS.index("commission")] > 0
    # at the ask: each put's mid at bar 7's close (spot 95; 26 and 57 days left) plus every cost of the purchase
    mids = put_mid(95.0, 100.0, 26) * contracts[0] + put_mid(95.0, 95.0, 57) * contracts[1]
    assert env.cash.item() == pytest.approx(cash * DAY - mids * 100 - paid.sum().item(), rel=1e-12)
    assert env.margin.item() == 0.0 and env.cash.item() > 0
    step(env, a.hold)
    assert env.stats["margin_calls"].item() == 1, "counted once"
    while result.episodes is None:
        result = step(env, a.hold)
    assert result.episodes["margin_calls"][0] == 1


def test_shares_cover_short_calls_share_for_share():
    """Half the account in the underlying (5,000 shares at 100), then calls sold at the money with up to 30% of
    equity in margin: the shares cover 5,000 of the calls' shares, so only the rest of the calls' requirement
    stands; out of the underlying, all of it does; with enough shares, none."""
    env = hand_env(np.full(20, 100.0), position_frac=0.3)
    a = env.actions
    call_mid = lambda days: black_scholes(100.0, 100.0, days / 365, R, Q, VOL, call=True)  # noqa: E731
    naked = lambda days, contracts: (call_mid(days) + max(STOCK_A, STOCK_B) * 100.0) * contracts * 100  # noqa: E731
    step(env, a.stock(1))  # bar 3: 50%, floor(0.5 x 1e6 / 100) shares
    assert env.shares.item() == 5000
    step(env, a.sell(is_call=True, moneyness_index=1, expiry_index=0))  # bar 4: 30 days
    contracts = env.contracts[0, 0].item()
    assert env.short[0, 0] and contracts * 100 > 5000
    assert env.margin.item() == pytest.approx(naked(30, contracts) * (1 - 5000 / (contracts * 100)), rel=1e-12)
    assert env.equity.item() == pytest.approx(env.cash.item() + 5000 * 100.0 - call_mid(30) * contracts * 100,
                                              rel=1e-12)
    step(env, a.stock(0))  # bar 5: out of the underlying, the calls are naked
    assert env.shares.item() == 0
    assert env.margin.item() == pytest.approx(naked(29, contracts), rel=1e-12)
    step(env, a.stock(2))  # bar 6: as many shares as the cash room (less the naked margin) buys
    shares = env.shares.item()
    assert 0 < shares < contracts * 100
    assert env.margin.item() == pytest.approx(naked(28, contracts) * (1 - shares / (contracts * 100)), rel=1e-12)
    # A smaller sale (5% of equity in margin) next to the same 5,000 shares is covered in full.
    env = hand_env(np.full(20, 100.0), position_frac=0.05)
    step(env, a.stock(1))
    step(env, a.sell(is_call=True, moneyness_index=1, expiry_index=0))
    assert env.short[0, 0] and 0 < env.contracts[0, 0].item() * 100 <= env.shares.item() == 5000
    assert env.margin.item() == 0.0
    step(env, a.sell(is_call=False, moneyness_index=1, expiry_index=0))  # a put is never covered by shares
    put = (black_scholes(100.0, 100.0, 30 / 365, R, Q, VOL, call=False) + max(STOCK_A, STOCK_B) * 100.0) \
        * env.contracts[1, 0].item() * 100
    assert env.short[1, 0] and env.margin.item() == pytest.approx(put, rel=1e-12)


def test_the_margin_is_never_left_uncovered_without_a_margin_call_on_random_rollouts():
    """A $20,000 synthetic account selling half its equity in margin at a time, on random valid actions: at every
    close either the cash covers the margin, or the next step buys back every short (and opens nothing), and
    counts exactly one margin call, which the episode's statistics carry."""
    data = build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=1500, seed=5)))
    env_cfg = EnvConfig(dtype="float64", initial_cash=20_000.0, position_frac=0.5, episode_length=60)
    n = 200
    env = BatchedOptionsEnv(data, "train", MarketConfig(), env_cfg, num_envs=n, seed=11)
    obs = env.reset()
    a = env.actions
    weight = torch.ones(a.n, dtype=torch.float64)
    weight[1 + 2 * a.grid_size:1 + a.option_orders] = 4.0  # sales
    gen = torch.Generator().manual_seed(3)
    counted = torch.zeros(n)
    seen = {"calls": 0, "shorts_called": 0, "episodes_with_calls": 0}
    for _ in range(200):
        called = (env.cash < env.margin) & (env.margin > 0)
        assert not obs.mask[called, 1:1 + a.option_orders].any(), "nothing opens while the margin is uncovered"
        calls_before, shorts_before = env.stats["margin_calls"].clone(), (env.active & env.short).sum(0)
        action = torch.multinomial(obs.mask.double() * weight, 1, generator=gen).squeeze(-1)
        result = env.step(action)
        obs = result.obs
        counted += called
        live = ~(result.terminated | result.truncated)
        assert torch.equal(env.stats["margin_calls"][live], (calls_before + called)[live])
        assert not (env.active & env.short)[:, called & live].any(), "a margin call leaves no short"
        if result.episodes is not None:
            ended = torch.as_tensor(result.episodes["env"])
            assert np.array_equal(result.episodes["margin_calls"], counted[ended].numpy())
            seen["episodes_with_calls"] += int((counted[ended] > 0).sum())
            counted[ended] = 0
        seen["calls"] += int(called.sum())
        seen["shorts_called"] += int(shorts_before[called].sum())
    assert seen["calls"] > 100 and seen["shorts_called"] > 150 and seen["episodes_with_calls"] > 30, seen


def test_a_short_is_never_opened_where_the_mask_forbids_it():
    """Sales sent at random, most of them masked (a small account, the slots full, a turbulent bar, a margin
    call): a masked sale is held instead and counted as invalid; nothing opens. A twin env that is sent hold
    wherever the sale was masked stays identical."""
    data = build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=1500, seed=5)))
    env_cfg = EnvConfig(dtype="float64", initial_cash=30_000.0, position_frac=0.3)
    n = 200
    wild_env = BatchedOptionsEnv(data, "train", MarketConfig(), env_cfg, num_envs=n, seed=4)
    safe_env = BatchedOptionsEnv(data, "train", MarketConfig(), env_cfg, num_envs=n, seed=4)
    obs, twin = wild_env.reset(), safe_env.reset()
    a = wild_env.actions
    first_sale, sales = 1 + 2 * a.grid_size, 2 * a.grid_size
    gen = torch.Generator().manual_seed(5)
    rows = torch.arange(n)
    masked_sent = allowed_sent = 0
    for _ in range(150):
        sale = first_sale + torch.randint(0, sales, (n,), generator=gen)
        other = random_valid(obs.mask, gen)
        wild = torch.where(torch.rand(n, generator=gen) < 0.7, sale, other)
        valid = obs.mask[rows, wild]
        assert torch.equal(obs.mask, twin.mask)
        masked = ~valid & (wild >= first_sale) & (wild < first_sale + sales)
        open_before, invalid_before = wild_env.active.sum(0), wild_env.stats["invalid"].clone()
        shorts_before = (wild_env.active & wild_env.short).sum(0)
        result = wild_env.step(wild)
        twin = safe_env.step(torch.where(valid, wild, torch.zeros_like(wild))).obs
        obs = result.obs
        live = ~(result.terminated | result.truncated)
        assert (wild_env.active.sum(0) <= open_before)[masked & live].all(), "a masked sale opened something"
        assert ((wild_env.active & wild_env.short).sum(0) <= shorts_before)[masked & live].all()
        assert torch.equal(wild_env.stats["invalid"][live], (invalid_before + ~valid)[live])
        assert torch.equal(wild_env.equity, safe_env.equity) and torch.equal(wild_env.active, safe_env.active)
        assert torch.equal(wild_env.short, safe_env.short) and torch.equal(wild_env.cash, safe_env.cash)
        masked_sent += int(masked.sum())
        allowed_sent += int((valid & (wild >= first_sale) & (wild < first_sale + sales)).sum())
    assert masked_sent > 2000 and allowed_sent > 500, (masked_sent, allowed_sent)


@pytest.fixture(scope="module")
def sp500():
    cfg = Config()
    cfg.env = dataclasses.replace(cfg.env, dtype="float64")
    return build_market_data(cfg.data), cfg


def hold_after(first_action: int):
    """A walk policy: ``first_action`` on the walk's first bar, then hold."""
    def act(obs, started):
        action = torch.full((obs.mask.shape[0],), 0 if started else first_action, dtype=torch.long)
        return action, True
    return act, False


def carry(data, cfg, first: int, last: int) -> tuple[np.ndarray, np.ndarray]:
    """(years, rate) of each step of a walk from bar ``first`` to ``last``: calendar days between the closes over
    365, and the rate known at the step's first close."""
    stamps = data.dates[first:last + 1]
    years = np.array([(b - a).total_seconds() / 86400 / 365 for a, b in zip(stamps[:-1], stamps[1:], strict=True)])
    return years, market_inputs(data, cfg.market).rate[0, first:last]


def test_cash_alone_grows_exactly_at_the_rate_series(sp500):
    """The cash policy over the S&P 500's test split (2014-2018, the 3-month T-bill): its equity is the initial
    cash times exp(rate[t] x days / 365), compounded bar by bar."""
    data, cfg = sp500
    result = walk("cash", *cash_policy(), data, "test", cfg, "cpu")
    first = data.dates.get_loc(result.dates[0])
    years, rate = carry(data, cfg, first, first + len(result.dates) - 1)
    expected = cfg.env.initial_cash * np.concatenate([[1.0], np.cumprod(np.exp(rate * years))])
    np.testing.assert_allclose(result.equity[0], expected, rtol=1e-12)
    assert expected[-1] / expected[0] - 1 > 0.01  # the rates really moved it (2014-2018: about 2.5%)


def test_holding_all_of_the_underlying_from_the_first_fill_tracks_buy_and_hold(sp500):
    """The 100% target sent on the walk's first bar buys fractional shares (market.sizing's default) at its first
    fill (bar first + 1) with the cash room (the account less two commission minimums, at fill x (1 + bps) a
    share); the rest stays in cash.
    From then on its equity is exactly those shares at each close plus that cash, earning the rate, with the
    dividend yield paid on the shares. Buy-and-hold holds fractional shares instead: the two differ by less than
    one share's worth of the price (the whole-share rounding) plus the leftover cash (under one share's price
    and the two commission minimums), each grown by the carry. 82 of the split's 754 bars are turbulent: they
    close options, never the shares (docs/MARKET.md, step 2)."""
    data, cfg = sp500
    assert (data.turbulence[slice(*data.splits["test"])] > data.turbulence_threshold).sum() > 50
    actions = ActionSpace.from_config(cfg.market)
    assert actions.stock_targets[2] == 1.0
    env_policy = walk("underlying", *hold_after(actions.stock(2)), data, "test", cfg, "cpu")
    bench = buy_and_hold(data, "test", cfg)
    first = data.dates.get_loc(env_policy.dates[0])
    last = first + len(env_policy.dates) - 1
    close = data.bars["close"][0, first:last + 1]
    fill = close[1] if market_inputs(data, cfg.market).stale_open[0, first + 1] else data.bars["open"][0, first + 1]
    bps, c = cfg.market.costs.share_cost_bps / 1e4, cfg.market.costs
    years, rate = carry(data, cfg, first, last)
    room = cfg.env.initial_cash * math.exp(rate[0] * years[0]) - 2 * c.commission_min_per_order  # at the fill
    shares = min(cfg.env.initial_cash / fill, room / (fill * (1 + bps)))
    assert env_policy.equity.shape == (1, len(close)) and shares > 300
    q = float(market_inputs(data, cfg.market).dividend_yield[0])
    cash = [cfg.env.initial_cash, cfg.env.initial_cash * math.exp(rate[0] * years[0]) - shares * fill * (1 + bps)]
    for k in range(1, len(years)):
        cash.append(cash[-1] * math.exp(rate[k] * years[k]) + shares * close[k] * math.expm1(q * years[k]))
    expected = np.array(cash) + np.concatenate([[0.0], shares * close[1:]])
    np.testing.assert_allclose(env_policy.equity[0], expected, rtol=1e-12)
    assert env_policy.costs[0, COST_KINDS.index("shares")] == pytest.approx(shares * fill * bps, rel=1e-12)
    assert env_policy.closed[0] == 0 and env_policy.open_at_end[0] == 0
    growth = np.concatenate([[1.0], np.cumprod(np.exp((rate + q) * years))])  # what carries a dollar or a share
    bound = (close + fill * (1 + bps) + 2 * c.commission_min_per_order) * growth
    gap = np.abs(env_policy.equity[0] - bench.equity[0])
    assert (gap <= bound).all(), (gap / bound).max()  # about 0.4% of the account at most; in fact under 0.05%


def test_a_fully_invested_holder_writes_covered_calls_on_every_share_without_margin():
    """After buying the underlying with the whole account (too little cash left for one naked call's margin),
    an at-the-money call sale is still valid: the shares cover it, so it sells one contract per 100 shares not
    yet under a call, and the book's margin stays 0."""
    env = hand_env(np.full(40, 100.0))
    a = env.actions
    step(env, a.stock(2))
    shares = float(env.shares[0])
    assert shares >= 9_000 and float(env.cash_room()[0]) < 2_000, "fully invested: no room for naked margin"
    call = a.sell(True, a.moneyness.index(1.0), a.expiries_days.index(30))
    assert bool(env.action_mask()[0, call]), "covered by the shares"
    assert not bool(env.action_mask()[0, a.sell(False, a.moneyness.index(1.0), a.expiries_days.index(30))]), \
        "a put is never covered"
    step(env, call)
    sold = env.contracts[:, 0][env.active[:, 0] & env.short[:, 0]]
    assert sold.tolist() == [pytest.approx(shares / 100, rel=1e-12)]  # fractional contracts: every share
    assert float(env.margin[0]) == 0.0 and float(env.free_cover()[0]) == 0.0, "every share is under a call now"
