"""The batched env's own rules: invariants over random rollouts, masks, fills, expiry, costs, turbulence, the
notional cap, reward shaping and episode statistics (the step-by-step reference: test_env_reference.py)."""
import dataclasses
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from env_trajectory import random_valid
from market_fixtures import handmade_market
from reference_agreement import EXACT
from reference_env import black_scholes

from clstm_ppo.config import CostConfig, DataConfig, EnvConfig, MarketConfig, SyntheticConfig
from clstm_ppo.data import MarketData, build_market_data
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv
from clstm_ppo.market import COST_KINDS, bs_price


def independent_marks(env: BatchedOptionsEnv) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mark every open position of an env on an index again from its state and per-bar tables with the plain
    pricing function and the vol surface of docs/MARKET.md written out (term structure, maturity-scaled skew,
    smile, clamps), and work out the shorts' margin from its formula: (long marks, short marks (what buying them
    back costs at mid, positive), margin), each (N,)."""
    m, q = env.market_cfg, env.quotes
    spot = q.close_px[env.sym, env.t].expand_as(env.strike)  # positions are (P, N): slot-major
    strike = torch.where(env.active, env.strike, spot)
    years = (env.expiry_time - q.close_time[env.t]).clamp_min(0) / 365.0
    atm30, long_run = q.iv_close[env.sym, env.t], q.long_run_iv[env.sym]
    share = lambda u: -torch.expm1(-u) / u if m.term_reversion > 0 else torch.ones_like(u)  # noqa: E731
    kappa, tau0 = m.term_reversion, torch.tensor(30.0 / 365.0, dtype=years.dtype)
    var = long_run ** 2 + (atm30 ** 2 - long_run ** 2) * share(kappa * years.clamp_min(1e-12)) / share(kappa * tau0)
    z = (torch.log(strike / spot) / torch.sqrt(years.clamp_min(1 / 365.0) / tau0)).clamp(-m.iv_wing_z, m.iv_wing_z)
    skew = torch.where(z > 0, z.new_tensor(m.iv_call_skew), z.new_tensor(m.iv_skew))  # above the money: the calls
    iv = (var.clamp_min(m.min_iv ** 2).sqrt() - skew * z + m.iv_smile * z * z).clamp(m.min_iv, m.max_iv)
    price = bs_price(spot, strike, years, q.rate_close[env.sym, env.t], q.dividend_yield[env.sym], iv, env.is_call)
    held = price * env.contracts * m.multiplier
    long, short = env.active & ~env.short, env.active & env.short
    zero = torch.zeros_like(held)
    # Margin per share: max(premium + a S - OTM, premium + b (K for a put, S for a call)), index or stock rates.
    a_rate, b_rate = m.index_margin  # the synthetic market is a broad-based index
    otm = torch.where(env.is_call, (strike - spot).clamp_min(0), (spot - strike).clamp_min(0))
    per_share = torch.maximum(price + a_rate * spot - otm, price + b_rate * torch.where(env.is_call, spot, strike))
    need = torch.where(short, per_share * env.contracts * m.multiplier, zero)
    call_need = torch.where(env.is_call, need, zero).sum(0)
    call_shares = torch.where(short & env.is_call, env.contracts * m.multiplier, zero).sum(0)
    # Shares within a billionth of the calls' cover them: fractional counts round (docs/MARKET.md, "Sizing").
    covered = torch.where(call_shares > 0, (env.shares / call_shares).clamp(max=1.0), torch.zeros_like(call_shares))
    covered = torch.where(covered >= 1 - 1e-9, torch.ones_like(covered), covered)
    margin = need.sum(0) - covered * call_need
    return torch.where(long, held, zero).sum(0), torch.where(short, held, zero).sum(0), margin


def test_invariants_on_random_rollouts_of_1000_copies(synthetic_data):
    """Equity is cash plus the longs' marks minus the shorts' plus the shares at the close, all worked out again;
    so is the margin; cash goes below zero only after a short has been held."""
    env = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), EXACT, num_envs=1000, seed=1)
    obs = env.reset()
    gen = torch.Generator().manual_seed(0)
    turbulent_col = PORTFOLIO_FEATURES.index("turbulent")
    a = env.actions
    opens = slice(1, 1 + a.option_orders)
    last_costs = env.costs_paid.clone()
    had_short = torch.zeros(1000, dtype=torch.bool)
    seen = {"opened": 0, "turbulent": 0, "episodes": 0, "shorts": 0, "shares": 0}
    for _ in range(300):
        turbulent = obs.portfolio[:, turbulent_col] > 0.5
        assert not obs.mask[turbulent][:, opens].any(), "nothing opens when turbulent"
        action = random_valid(obs.mask, gen)
        before_open, shares_before = env.active.sum(0), env.shares.clone()
        result = env.step(action)
        obs = result.obs
        done = result.terminated | result.truncated
        live = ~done  # copies that were auto-reset start afresh: compare the others
        had_short = (had_short | (env.active & env.short).any(0)) & live
        long_marks, short_marks, margin = independent_marks(env)
        spot = env.quotes.close_px[env.sym, env.t]
        torch.testing.assert_close(env.equity, env.cash + long_marks - short_marks + env.shares * spot,
                                   rtol=1e-12, atol=1e-6)
        torch.testing.assert_close(env.margin, margin, rtol=1e-12, atol=1e-6)
        assert (env.shares >= 0).all(), "never short (fractional shares: market.sizing's default)"
        assert (env.cash[~had_short] >= 0).all()
        assert (env.costs_paid >= 0).all()
        assert (env.costs_paid[:, live] >= last_costs[:, live] - 1e-9).all(), "costs only ever accumulate"
        assert (env.active[:, turbulent & live].sum(0) == 0).all(), "every option closes after a turbulent bar"
        assert (env.shares[turbulent & live] <= shares_before[turbulent & live]).all(), "shares never grow then"
        now = env.quotes.close_time[env.t]
        assert (env.expiry_bar[env.active] > env.t.expand_as(env.active)[env.active]).all(), "expired ones settled"
        assert (env.expiry_time[env.active] > now.expand_as(env.active)[env.active]).all()
        last_costs = env.costs_paid.clone()
        seen["turbulent"] += int(turbulent.sum())
        seen["opened"] += int((env.active.sum(0) > before_open).sum())
        seen["shorts"] += int((env.active & env.short).sum())
        seen["shares"] += int((env.shares > 0).sum())
        seen["episodes"] += 0 if result.episodes is None else len(result.episodes["return"])
        if result.episodes is not None:
            ep = result.episodes
            assert (ep["wins"] <= ep["closed"]).all() and (ep["costs"] >= 0).all()
            assert np.allclose([c[-1] for c in ep["equity_curve"]], ep["return"] + EXACT.initial_cash)
    assert seen["turbulent"] > 100 and seen["opened"] > 1000 and seen["episodes"] > 100, seen
    assert seen["shorts"] > 10_000 and seen["shares"] > 10_000 and had_short.any(), seen


def test_a_notional_cap_stops_cheap_options_coming_by_the_thousand(sp500_data):
    """June 2017, the VIX at 9.9: 5% of $1M in premium buys the 30-day 1.05 call (a mid of 9 cents a share, a
    ten-cent ask on the $0.05 grid) by the thousand and pays 6% of the order in commission. On the one-skew surface
    of the grids before 2026-11-27 (a fraction of a cent a share) it came by the 23,944, its volume cap, and its
    commission was 93% of the order: how 2016-18 ruined most agents of those grids (docs/RESULTS.md). With
    env.max_order_notional 1 every order holds at most the account's equity in the index: 4 whole contracts at
    2,430, $43 with their fees (market.sizing whole), or the 4.1 that the equity's notional holds (fractional)."""
    start = torch.tensor([int(np.searchsorted(sp500_data.dates, np.datetime64("2017-06-01")))])
    commission = COST_KINDS.index("commission")
    orders = {}
    for is_call, moneyness in ((True, 2), (True, 1), (False, 0)):  # the 1.05 and ATM calls, the 0.95 put
        for cap, sizing in ((0.0, "whole"), (1.0, "whole"), (1.0, "fractional")):
            env = BatchedOptionsEnv(sp500_data, "test", MarketConfig(sizing=sizing), EnvConfig(dtype="float64",
                                    max_order_notional=cap), 1, seed=0, autoreset=False)
            obs = env.reset(start)
            equity = float(env.equity[0])
            action = env.actions.buy(is_call=is_call, moneyness_index=moneyness, expiry_index=0)
            assert bool(obs.mask[0, action])
            env.step(torch.tensor([action]))
            contracts, paid = float(env.contracts[0, 0]), float(env.entry_cost[0, 0])
            orders[is_call, moneyness, cap, sizing] = contracts, paid, float(env.costs_paid[commission, 0])
            if cap:  # the index's notional at the fill (the next open) within the equity at the decision's close
                spot = float(env.quotes.fill_px[0, int(start) + 1])
                most = cap * equity / (spot * 100)
                assert contracts == (math.floor(most) if sizing == "whole" else pytest.approx(most, rel=1e-12))
                assert 4 <= contracts < 4.2
                fee = max(contracts * CostConfig().commission_per_contract, CostConfig().commission_min_per_order)
                assert orders[is_call, moneyness, cap, sizing][2] == pytest.approx(fee)
            else:
                assert contracts > 4
    contracts, paid, fees = orders[True, 2, 0.0, "whole"]
    assert contracts > 4_000 and fees > 0.05 * paid  # thousands of contracts, their commission a cost that counts
    assert orders[True, 2, 1.0, "whole"][1] < 50.0  # four of the same calls: tens of dollars, fees and all
    # A cap below one whole contract of the index (2016-18: 1,829 at its lowest close) would leave a stock-only agent.
    with pytest.warns(UserWarning, match=r"env.max_order_notional 0.1 x env.initial_cash 1,000,000 is below one "
                                         r"contract's notional \(182,9\d\d at the lowest close of the test split\)"):
        BatchedOptionsEnv(sp500_data, "test", MarketConfig(sizing="whole"), EnvConfig(max_order_notional=0.1), 1,
                          seed=0)
    with warnings.catch_warnings():  # fractional orders fit under any cap: a tenth of a contract is an order
        warnings.simplefilter("error")
        BatchedOptionsEnv(sp500_data, "test", MarketConfig(), EnvConfig(max_order_notional=0.1), 1, seed=0)


def test_a_masked_action_is_never_executed(synthetic_data):
    a = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), EXACT, num_envs=200, seed=3)
    b = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), EXACT, num_envs=200, seed=3)
    obs_a, obs_b = a.reset(), b.reset()
    gen = torch.Generator().manual_seed(1)
    masked_sent = 0
    for _ in range(120):
        wild = torch.randint(0, a.actions.n, (200,), generator=gen)  # often invalid
        masked_sent += int((~obs_a.mask[torch.arange(200), wild]).sum())
        safe = torch.where(obs_b.mask[torch.arange(200), wild], wild, torch.zeros_like(wild))  # invalid -> hold
        obs_a, obs_b = a.step(wild).obs, b.step(safe).obs
        assert torch.equal(a.equity, b.equity) and torch.equal(a.active, b.active)
    assert masked_sent > 1000 and a.stats["invalid"].sum() > 0


def frozen_clock(data: MarketData) -> MarketData:
    """The same bars, all stamped at one instant: no time passes between them (nor between an open and a close)."""
    return dataclasses.replace(data, dates=pd.DatetimeIndex([data.dates[0]] * len(data.dates)))


@pytest.mark.parametrize("clock", ["frozen", "daily"])
def test_round_trip_at_unchanged_underlying_loses_exactly_the_itemised_costs(clock):
    """Bought and sold one bar apart at an unchanged underlying and vol: with no time passing, the round trip loses
    exactly its itemised costs; a day apart, it also loses one day of the option's time value and its cash earns
    a day's interest at each step (the hand-made bars' opens are stale, so both fills happen at a close: bar 3's,
    then bar 4's)."""
    data = handmade_market(np.full(40, 100.0))
    data = frozen_clock(data) if clock == "frozen" else data
    market = MarketConfig()
    env = BatchedOptionsEnv(data, "train", market, EnvConfig(dtype="float64", episode_length=0), 1, seed=0)
    obs = env.reset()
    start = env.equity.clone()
    growth = math.exp(market.risk_free_rate * (1 if clock == "daily" else 0) / 365)  # a step's carry
    interest = env.cash.item() * (growth - 1)
    buy = env.actions.buy(is_call=True, moneyness_index=1, expiry_index=0)
    assert obs.mask[0, buy]
    env.step(torch.tensor([buy]))
    assert env.active.sum() == 1 and env.strike[0, 0] == 100.0
    contracts = env.contracts[0, 0].item()
    after_buy = env.costs_paid.clone()
    assert (start - env.equity).item() == pytest.approx(after_buy.sum().item() - interest, rel=1e-12)  # at mid
    interest += env.cash.item() * (growth - 1)
    env.step(torch.tensor([env.actions.close_all]))
    assert env.active.sum() == 0 and env.stats["closed"].item() == 1 and env.stats["wins"].item() == 0
    total = env.costs_paid.sum().item() - interest
    if clock == "daily":  # at the money, the hand-made iv (0.2) x atm_per_iv at every maturity (the long-run vol is
        # the same): 30 days, then 29
        mid = lambda days: black_scholes(100.0, 100.0, days / 365, market.risk_free_rate,  # noqa: E731
                                         market.dividend_yield, 0.2 * market.atm_per_iv, True)
        total += (mid(30) - mid(29)) * contracts * market.multiplier
    assert (start - env.equity).item() == pytest.approx(total, rel=1e-12)
    assert (start - env.cash).item() == pytest.approx(total, rel=1e-12)
    assert env.costs_paid[COST_KINDS.index("sec_fee"), 0] > 0 and env.costs_paid[COST_KINDS.index("spread"), 0] > 0


def test_an_order_fills_at_the_next_open_or_at_its_close_when_that_open_is_stale():
    """The strike is listed around the fill's spot: bar 3's traded open (90) or, when that open only repeats bar
    2's close, bar 3's close (110)."""
    close = np.full(40, 100.0)
    close[3:] = 110.0
    strikes = {}
    for name in ("stale", "traded"):
        data = handmade_market(close)
        if name == "traded":
            data.bars["open"][0, 3] = 90.0
        env = BatchedOptionsEnv(data, "train", MarketConfig(), EnvConfig(dtype="float64", episode_length=0), 1, seed=0)
        env.reset()  # at bar 2
        env.step(torch.tensor([env.actions.buy(is_call=True, moneyness_index=1, expiry_index=0)]))
        strikes[name] = env.strike[0, 0].item()
        # listed for day(3) + 30 = bar 33's day; at the open the position has 6.5 hours more to run
        assert env.expiry_time[0, 0].item() == 33.0 and env.expiry_bar[0, 0].item() == 33
        if name == "traded":  # bought at 90 at the open, worth at least 20 intrinsic at the close
            assert env.mark[0, 0].item() > 20.0 * env.contracts[0, 0].item() * 100
    assert strikes == {"stale": 110.0, "traded": 90.0}


def test_options_expire_on_the_last_trading_day_on_or_before_their_listed_day():
    """Business-day bars from Monday 2020-01-06. A 30-day call filled on Thursday (bar 3) is listed for Saturday
    2020-02-08 and expires at Friday's close (bar 24), at intrinsic; a 60-day call filled on Friday (bar 4) is
    listed past the data's end, never expires inside it, and counts its days to the listed day."""
    close = 100.0 + np.arange(30.0)
    data = dataclasses.replace(handmade_market(close), dates=pd.bdate_range("2020-01-06", periods=30))
    env = BatchedOptionsEnv(data, "train", MarketConfig(), EnvConfig(dtype="float64", episode_length=0), 1, seed=0,
                            autoreset=False)
    env.reset()
    env.step(torch.tensor([env.actions.buy(is_call=True, moneyness_index=1, expiry_index=0)]))  # fills at bar 3
    env.step(torch.tensor([env.actions.buy(is_call=True, moneyness_index=1, expiry_index=1)]))  # fills at bar 4
    assert env.active[:2, 0].all()
    strike, contracts = env.strike[0, 0].item(), env.contracts[0, 0].item()
    assert strike == close[3] and env.expiry_bar[0, 0] == 24 and env.expiry_time[0, 0] == 32.0  # Feb 7 - Jan 6
    assert env.expiry_time[1, 0] == 4.0 + 60.0
    days_col = PORTFOLIO_FEATURES.index("days_to_expiry")
    while env.t.item() < 23:
        obs = env.step(torch.tensor([0])).obs
    now = 31.0  # bar 23, Thursday Feb 6: days to each expiry, averaged, over the longest listed expiry
    assert obs.portfolio[0, days_col].item() == pytest.approx(((32.0 - now) + (64.0 - now)) / 2 / 60)
    cash = env.cash.item() * math.exp(MarketConfig().risk_free_rate / 365)  # with a day's interest
    env.step(torch.tensor([0]))  # bar 24, Friday Feb 7: the 30-day call settles at its close
    assert env.active[:, 0].tolist()[:2] == [False, True] and env.stats["closed"].item() == 1
    assert env.cash.item() - cash == pytest.approx((close[24] - strike) * contracts * 100, rel=1e-12)
    while env.t.item() < env.t_end.item():
        result = env.step(torch.tensor([0]))
    assert result.truncated.item() and result.episodes["open"][0] == 1  # still open at the data's last bar


def test_an_opening_order_takes_at_most_its_share_of_the_strike_volume_and_a_close_is_never_cut():
    """Underlying volume 1e8: the at-the-money 30-day proxy is 1e8 x 2e-6 = 200 contracts, less for a far strike
    (e^-|ln K/S| / 0.10) and a longer expiry ((30 / 60) ^ 1); an opening order takes at most 10% of it."""
    market = MarketConfig(costs=CostConfig(option_volume_ratio=2e-6, volume_moneyness_width=0.1,
                                           volume_expiry_power=1.0, max_volume_share=0.1, min_option_volume=50.0))
    c = market.costs
    data = handmade_market(np.full(50, 100.0))
    data.bars["volume"][:] = 1e8
    env = BatchedOptionsEnv(data, "train", market, EnvConfig(dtype="float64", episode_length=0), 1, seed=0)
    env.reset()
    orders = [(0, 0), (1, 0), (1, 1)]  # (moneyness index, expiry index): 0.95 x 30 days, ATM x 30, ATM x 60
    for m, e in orders:
        env.step(torch.tensor([env.actions.buy(is_call=False, moneyness_index=m, expiry_index=e)]))
    base = max(1e8 * c.option_volume_ratio, c.min_option_volume)
    proxy = [base * math.exp(-abs(math.log(0.95)) / c.volume_moneyness_width), base, base * (30 / 60)]
    # Fractional contracts (the default): exactly the share of the proxy; whole ones would be [11, 20, 10].
    np.testing.assert_allclose(env.contracts[:3, 0].numpy(), [c.max_volume_share * v for v in proxy], rtol=1e-12)
    before = env.costs_paid[COST_KINDS.index("slippage"), 0].item()
    env.step(torch.tensor([env.actions.close_all]))  # at bar 6's close, 3 days after the first fill
    assert env.active.sum() == 0 and env.stats["closed"].item() == 3
    assert env.costs_paid[COST_KINDS.index("slippage"), 0].item() > before


def test_an_expired_option_pays_its_intrinsic_value():
    close = np.concatenate([np.full(5, 100.0), np.linspace(100.0, 112.0, 31), np.full(10, 112.0)])
    data = handmade_market(close)
    env = BatchedOptionsEnv(data, "train", MarketConfig(expiries_days=[30]), EnvConfig(dtype="float64",
                            episode_length=0), 1, seed=0)
    env.reset()  # the episode starts at bar window-1 = 2
    env.step(torch.tensor([env.actions.buy(is_call=True, moneyness_index=0, expiry_index=0)]))  # fills at bar 3
    strike, contracts = env.strike[0, 0].item(), env.contracts[0, 0].item()
    assert strike == 95.0 and contracts > 0
    cash, day = env.cash.item(), math.exp(MarketConfig().risk_free_rate / 365)  # cash earns a day's interest a bar
    for _ in range(29):
        env.step(torch.tensor([0]))
    assert env.active.sum() == 1 and env.cash.item() == pytest.approx(cash * day ** 29, rel=1e-12)  # one day left
    cash = env.cash.item() * day
    env.step(torch.tensor([0]))  # bar 33: 30 calendar days after the fill, it expires at the close
    assert env.active.sum() == 0
    expected = (close[33] - strike) * contracts * 100
    assert env.cash.item() - cash == pytest.approx(expected, rel=1e-12)
    assert env.stats["closed"].item() == 1


def test_turbulence_forces_closes_at_the_next_open_and_blocks_opens():
    turbulence = np.zeros(30)
    turbulence[6] = 5.0
    data = handmade_market(np.full(30, 100.0), turbulence=turbulence, threshold=1.0)
    env = BatchedOptionsEnv(data, "train", MarketConfig(), EnvConfig(dtype="float64", episode_length=0), 1, seed=0)
    obs = env.reset()
    buy = env.actions.buy(is_call=False, moneyness_index=1, expiry_index=1)
    while env.t.item() < 6:
        obs = env.step(torch.tensor([buy if obs.mask[0, buy] else 0])).obs
    assert env.active.sum() >= 1 and obs.portfolio[0, PORTFOLIO_FEATURES.index("turbulent")] == 1
    assert not obs.mask[0, 1:1 + 2 * env.actions.grid_size].any() and obs.mask[0, 0]
    obs = env.step(torch.tensor([buy])).obs  # masked: held instead; forced closes fill at bar 7 (its close:
    # the hand-made opens are stale)
    assert env.active.sum() == 0 and env.stats["invalid"].item() == 1
    assert obs.mask[0, buy]  # calm again


def test_the_market_window_ends_at_the_current_bar_on_every_underlying():
    """No look-ahead: the window seen at bar t is bars t-TW+1 .. t of the copy's own underlying, nothing later."""
    data = build_market_data(DataConfig(source="synthetic", window=7,
                                        synthetic=SyntheticConfig(n_bars=600, n_underlyings=3, seed=2)))
    env = BatchedOptionsEnv(data, "train", MarketConfig(), EXACT, num_envs=64, seed=4)
    obs = env.reset()
    gen = torch.Generator().manual_seed(5)
    for _ in range(40):
        sym, t = env.sym.numpy(), env.t.numpy()
        expected = np.stack([data.features[s, b - 6: b + 1] for s, b in zip(sym, t, strict=True)])
        np.testing.assert_array_equal(obs.market.numpy(), expected)
        replayed = env.market_windows.gather(obs.row)  # what the update replays
        np.testing.assert_array_equal(replayed.numpy(), expected)
        obs = env.step(random_valid(obs.mask, gen)).obs
    assert len(set(env.sym.tolist())) == 3


def test_optional_reward_shaping_subtracts_exactly_its_terms(synthetic_data):
    """Twin envs on the same actions: the shaped reward differs by the drawdown and turbulence terms only (the
    latter for a copy holding an option or a share at a turbulent close)."""
    shaped_cfg = EnvConfig(dtype="float64", drawdown_penalty=0.3, turbulence_penalty=0.05)
    plain = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), EXACT, num_envs=200, seed=6)
    shaped = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), shaped_cfg, num_envs=200, seed=6)
    obs, _ = plain.reset(), shaped.reset()
    gen = torch.Generator().manual_seed(7)
    penalised = 0
    for _ in range(150):
        action = random_valid(obs.mask, gen)
        a, b = plain.step(action), shaped.step(action)
        obs = a.obs
        live = ~(a.terminated | a.truncated)  # finished copies were reset: their state is the new episode's
        drawdown = 1.0 - shaped.equity / shaped.peak
        turbulent = shaped.turbulent_bar[shaped.t] & (shaped.active.any(0) | (shaped.shares > 0))
        expected = a.reward - 0.3 * drawdown - 0.05 * turbulent.double()
        torch.testing.assert_close(b.reward[live], expected[live], rtol=0, atol=1e-12)
        penalised += int((turbulent & live).sum())
    assert penalised > 50


def test_episode_statistics_come_to_the_host_the_same_in_one_packed_copy(synthetic_data):
    """On a GPU the episode statistics leave the device in one packed float64 copy (one host sync, not 18):
    every field must come back with the same values, dtypes and shapes as copying each tensor."""
    from clstm_ppo.env.episodes import episode_records, to_host

    env = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), EnvConfig(episode_length=20), num_envs=64,
                            seed=3)
    obs, gen = env.reset(), torch.Generator().manual_seed(1)
    ended = None
    while ended is None:
        result = env.step(random_valid(obs.mask, gen))
        obs, ended = result.obs, result.episodes
    mixed = {"flags": torch.tensor([True, False]), "index": torch.tensor([3, 2**52 + 1]),
             "f32": torch.tensor([[0.1, -2.5e7]], dtype=torch.float32), "f64": torch.tensor([1 / 3]),
             "empty": torch.zeros(0, 4)}
    for tensors in (mixed, {k: v for k, v in env.state.to_dict().items() if isinstance(v, torch.Tensor)}):
        plain, packed = to_host(tensors, packed=False), to_host(tensors, packed=True)
        for k, v in plain.items():
            assert packed[k].dtype == v.dtype and packed[k].shape == v.shape, k
            np.testing.assert_array_equal(packed[k], v, err_msg=k)
    stats = episode_records(env.spec, env.state, torch.as_tensor(ended["env"]), env.equity_curve)
    assert set(stats) == set(ended) and all(len(v) == len(ended["env"]) for v in stats.values())
