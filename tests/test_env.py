import copy
import dataclasses
import math

import gymnasium
import numpy as np
import pandas as pd
import pytest
import torch
from env_trajectory import make, make_sync_free
from gymnasium.utils.env_checker import check_env
from market_fixtures import handmade_market
from reference_env import Layout, Point, ReferenceCopy, ReferenceMarket, black_scholes

import clstm_ppo  # noqa: F401  (registers the gymnasium id)
from clstm_ppo.config import CostConfig, DataConfig, EnvConfig, MarketConfig, SyntheticConfig
from clstm_ppo.data import MarketData, build_market_data
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv
from clstm_ppo.env.gym_env import OptionsTradingEnv
from clstm_ppo.market import COST_KINDS, bs_price
from clstm_ppo.market.observed import observed_feature_names

EXACT = EnvConfig(dtype="float64", initial_cash=1_000_000.0)


@pytest.fixture(scope="module")
def synthetic_data():
    return build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=1500, seed=5)))


@pytest.fixture(scope="module")
def sp500_data():
    return build_market_data(DataConfig())


def random_valid(mask: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.multinomial(mask.double(), 1, generator=gen).squeeze(-1)


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
    covered = torch.where(call_shares > 0, (env.shares / call_shares).clamp(max=1.0), torch.zeros_like(call_shares))
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
        assert (env.shares == env.shares.floor()).all() and (env.shares >= 0).all(), "whole shares, never short"
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


def agree_with_reference(data, market: MarketConfig, env_cfg: EnvConfig, steps: int = 120, num_envs: int = 48,
                         starts: torch.Tensor | None = None, reference_market=None, reference_copy=None,
                         weights: dict | None = None, make_env=make) -> dict:
    """Step the batched env and one tests/reference_env.py copy per env copy on the same random valid actions;
    check every copy's observed portfolio and action mask, then its cash, shares, equity, reward, costs by kind,
    closes, wins and margin calls after each step. A copy whose episode ends is compared on its episode
    statistics and followed by a fresh reference copy. Returns counts of what was checked and of the paths the
    references went through. ``weights``: extra weight per action group (buy, sell, target, close) on the
    copies that act uniformly. ``make_env``: the eager env, or ``make_sync_free`` (the step compiled code runs)."""
    env = make_env(data, "train", market, env_cfg, num_envs, 3, True)
    obs = env.reset(starts)
    a = env.actions
    layout = Layout(market)
    assert (layout.n, layout.first_target, layout.close_all, layout.close_worst) == \
        (a.n, a.first_stock, a.close_all, a.close_worst)
    markets = [(reference_market or ReferenceMarket)(data, market, s) for s in range(len(data.symbols))]
    follow = lambda i: (reference_copy or ReferenceCopy)(markets[int(env.sym[i])], int(env.t[i]),  # noqa: E731
                                                         int(env.t_end[i]), env_cfg)
    refs = [follow(i) for i in range(num_envs)]
    every_ref = list(refs)
    # Half the copies act uniformly over the valid actions (each group weighted by ``weights``); the other half
    # mostly hold, so that positions live long enough to expire.
    g = len(layout.grid)
    group = {"buy": slice(1, 1 + 2 * g), "sell": slice(1 + 2 * g, 1 + layout.orders),
             "target": slice(layout.first_target, layout.close_all), "close": slice(layout.close_all, None)}
    weight = torch.ones(num_envs, a.n, dtype=torch.float64)
    for name, w in (weights or {}).items():
        weight[0::2, group[name]] = w
    weight[1::2, a.hold], weight[1::2, a.close_all:] = 6.0, 0.1
    gen = torch.Generator().manual_seed(0)
    checked = {"steps": 0, "closes": 0, "episodes": 0, "budget_bound": 0}
    dollar_in_reward = env_cfg.reward_scale / env_cfg.initial_cash  # money is compared to 1e-6 dollars
    for _ in range(steps):
        for i, ref in enumerate(refs):
            mask = ref.mask()
            assert obs.mask[i].tolist() == mask, f"copy {i} at bar {ref.t}"
            np.testing.assert_allclose(obs.portfolio[i].numpy(), ref.portfolio(), rtol=2e-6, atol=1e-7,
                                       err_msg=f"copy {i} at bar {ref.t}: {PORTFOLIO_FEATURES}")
            calm_and_free = len(ref.open_positions()) < env_cfg.max_positions and not ref.mk.turbulent[ref.t]
            checked["budget_bound"] += calm_and_free and not all(mask[1:1 + 2 * g])
        action = torch.multinomial(obs.mask.double() * weight, 1, generator=gen).squeeze(-1)
        rewards = [ref.step(int(action[i])) for i, ref in enumerate(refs)]
        result = env.step(action)
        obs = result.obs
        ended = {} if result.episodes is None else {int(i): k for k, i in enumerate(result.episodes["env"])}
        for i, ref in enumerate(refs):
            where = f"copy {i} at bar {ref.t}"
            if i in ended:  # the env has already started a new episode there: compare the one that ended
                ep, k = result.episodes, ended[i]
                equity, closed, wins, costs = ep["return"][k] + env_cfg.initial_cash, ep["closed"][k], ep["wins"][k], \
                    ep["costs"][k]
                shares, margin_calls = ep["shares"][k], ep["margin_calls"][k]
                assert ep["open"][k] == len(ref.open_positions()), where
                checked["episodes"] += 1
            else:
                equity, closed, wins, costs = (float(env.equity[i]), float(env.stats["closed"][i]),
                                               float(env.stats["wins"][i]), env.costs_paid[:, i].numpy())
                shares, margin_calls = float(env.shares[i]), float(env.stats["margin_calls"][i])
                # to 1e-9 of the account (cash can be a small remainder of large flows)
                assert float(env.cash[i]) == pytest.approx(ref.cash, abs=max(1e-6, 1e-9 * abs(ref.equity))), where
                assert int(env.active[:, i].sum()) == len(ref.open_positions()), where
                assert env.short[:, i][env.active[:, i]].tolist() == [p.short for p in ref.open_positions()], where
            assert equity == pytest.approx(ref.equity, rel=1e-9, abs=1e-6), where
            assert float(result.reward[i]) == pytest.approx(rewards[i], rel=1e-7, abs=dollar_in_reward * 1e-6), where
            assert (closed, wins, shares, margin_calls) == (ref.closed, ref.wins, ref.shares, ref.margin_calls), where
            np.testing.assert_allclose(costs, [ref.costs[k] for k in COST_KINDS], rtol=1e-9, atol=1e-6, err_msg=where)
            checked["steps"] += 1
        for i in ended:
            refs[i] = follow(i)
            every_ref.append(refs[i])
    checked["closes"] = sum(ref.closed for ref in every_ref)
    for name in vars(every_ref[0].seen):
        checked[name] = sum(getattr(ref.seen, name) for ref in every_ref)
    return checked


TIGHT = EnvConfig(dtype="float64", initial_cash=5_000.0, position_frac=0.2)
# A $20,000 account that puts up to half its equity into one sale's margin, and sells three times as often as it
# buys: sales sized by the cash room, then margin calls.
MARGIN = EnvConfig(dtype="float64", initial_cash=20_000.0, position_frac=0.5)
SELLS = {"sell": 3.0}


# Rich: cash never binds. Tight: a $5,000 account where the budget and the cash room decide most buys. Margin:
# shorts up to the cash room, called when the market moves against them.
@pytest.mark.parametrize("env_cfg", [EXACT, TIGHT, MARGIN], ids=["rich", "tight", "margin"])
def test_the_batched_env_agrees_with_a_plain_python_reference_step_by_step(synthetic_data, env_cfg):
    """The synthetic market: a model implied vol, one flat rate, a dividend yield, no stale opens, a thin option
    market (the order cap binds often), index margin rates."""
    checked = agree_with_reference(synthetic_data, MarketConfig(), env_cfg,
                                   weights=SELLS if env_cfg is MARGIN else None)
    assert checked["steps"] == 48 * 120 and checked["closes"] > 1000, checked
    if env_cfg is EXACT:
        assert checked["capped_buys"] > 100 and checked["expiries"] > 20, checked
        assert checked["sales"] > 500 and checked["buybacks"] > 500, checked
        assert checked["short_expiries_itm"] >= 10 and checked["short_expiries_otm"] >= 10, checked
        assert checked["covered_marks"] > 500 and checked["dividend_steps"] > 1000, checked
        assert checked["share_buys"] > 200 and checked["share_sales"] > 200, checked
        assert checked["room_bound_share_buys"] > 100 and checked["margin_calls"] > 20, checked
    elif env_cfg is TIGHT:
        assert checked["budget_bound"] > 200, checked  # the tight account really is limited by its cash
        assert checked["episodes"] > 10 and checked["expiries"] > 20, checked  # ruined: followed by fresh references
    else:
        assert checked["margin_calls"] > 200 and checked["margin_call_closes"] > 400, checked
        assert checked["room_bound_sales"] > 200 and checked["episodes"] > 20, checked


SP500_STARTS = torch.linspace(1500, 1880, 48).round().long()  # mid-2005 to 2007: stale opens come and go
SP500_MARGIN = EnvConfig(dtype="float64", initial_cash=300_000.0, position_frac=0.5)  # one contract's margin: ~$20k
# $135,000 of notional an order on $300,000: one contract of the index (1,180-1,560 over these bars) is $118k-$156k,
# so the cap cuts most orders to one contract and forbids any at times; a third of the orders are sales.
NOTIONAL_CAP = EnvConfig(dtype="float64", initial_cash=300_000.0, position_frac=0.2, max_order_notional=0.45)


# The S&P 500 from 2005 into 2008: real VIX closes and opens (or the EWMA model), daily T-bill rates, and bars
# whose open is stale (a copy of the previous close) mixed with traded opens; index margin rates.
@pytest.mark.parametrize("iv_source, env_cfg", [("auto", EXACT),
                                                ("model", EnvConfig(dtype="float64", initial_cash=60_000.0,
                                                                    position_frac=0.1)),
                                                ("auto", SP500_MARGIN), ("auto", NOTIONAL_CAP)],
                         ids=["vix-rich", "model-tight", "vix-margin", "vix-notional-cap"])
def test_the_batched_env_agrees_with_the_reference_on_the_sp500(sp500_data, iv_source, env_cfg):
    checked = agree_with_reference(sp500_data, MarketConfig(iv_source=iv_source), env_cfg, starts=SP500_STARTS,
                                   weights=SELLS if env_cfg in (SP500_MARGIN, NOTIONAL_CAP) else None)
    assert checked["steps"] == 48 * 120 and checked["closes"] > 500, checked
    assert checked["stale_fills"] > 500 and checked["open_fills"] > 500, checked
    assert checked["expiries"] > 0 and checked["early_expiries"] > 0, checked
    assert checked["share_buys"] > 200 and checked["dividend_steps"] > 1000, checked
    if env_cfg is EXACT:
        assert checked["sales"] > 500 and checked["buybacks"] > 500 and checked["covered_marks"] > 300, checked
        assert checked["short_expiries_itm"] >= 3 and checked["short_expiries_otm"] >= 3, checked
        assert checked["margin_calls"] > 10, checked
    elif env_cfg is SP500_MARGIN:
        assert checked["margin_calls"] > 100 and checked["margin_call_closes"] > 200, checked
        assert checked["room_bound_sales"] > 100, checked
    elif env_cfg is NOTIONAL_CAP:
        assert checked["notional_bound"] > 100 and checked["notional_masked"] > 100, checked
        assert checked["covered_past_cap"] > 20, checked
        assert checked["buys"] > 100 and checked["sales"] > 100, checked
    if env_cfg is not NOTIONAL_CAP:
        assert checked["notional_bound"] == checked["notional_masked"] == checked["covered_past_cap"] == 0, checked


def test_the_sync_free_step_agrees_with_the_reference_too(synthetic_data, sp500_data):
    """The step compiled code and GPUs run (every copy priced at a close, no host sync), run eagerly, against the
    reference on a rich synthetic account and on the S&P 500 under margin calls: the same checks as the eager env's
    (tests/test_functional_step.py holds the two paths to each other over longer trajectories)."""
    checked = agree_with_reference(synthetic_data, MarketConfig(), EXACT, make_env=make_sync_free)
    assert checked["steps"] == 48 * 120 and checked["expiries"] > 20 and checked["buybacks"] > 500, checked
    checked = agree_with_reference(sp500_data, MarketConfig(), SP500_MARGIN, starts=SP500_STARTS, weights=SELLS,
                                   make_env=make_sync_free)
    assert checked["margin_calls"] > 100 and checked["stale_fills"] > 500, checked


def intraday_market(days: int = 40, seed: int = 0) -> MarketData:
    """Two underlyings on hourly bars (10:00 to 16:00 on business days, with a two-day hole), each bar's open
    traded or (a third of them) at the previous close, which is stale only after the night (the clock read from
    the stamps: inside a session it is the price); per-bar implied vols at the open and close, per-bar rates, and one
    underlying whose prices carry its dividends (no dividend yield) and one whose do not. The first is a
    broad-based index (index margin rates), the second a stock."""
    from clstm_ppo.data import FEATURE_NAMES, Normalizer
    from clstm_ppo.data.calendar import detect_clock

    rng = np.random.default_rng(seed)
    sessions = pd.bdate_range("2021-03-01", periods=days).delete([7, 8])
    dates = pd.DatetimeIndex([d + pd.Timedelta(hours=h) for d in sessions for h in range(10, 17)])
    n, f = len(dates), len(FEATURE_NAMES)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.006, (2, n)), axis=1))
    close[1] *= 30.0  # strike steps 0.5 and 10
    previous = np.concatenate([close[:, :1], close[:, :-1]], axis=1)
    open_ = np.where(rng.random((2, n)) < 0.33, previous, previous * np.exp(rng.normal(0.0, 0.003, (2, n))))
    iv = 0.12 + 0.25 * rng.random((2, n))
    features = rng.normal(size=(2, n, f)).astype(np.float32)
    turbulence = rng.random(n)
    return MarketData(
        symbols=["AAA", "BBB"], dates=dates, feature_names=FEATURE_NAMES, features=features,
        raw_features=features.astype(np.float64),
        bars={"open": open_, "high": np.maximum(open_, close), "low": np.minimum(open_, close), "close": close,
              "volume": rng.uniform(1e7, 3e8, (2, n)), "iv": iv, "iv_open": iv * np.exp(rng.normal(0.0, 0.1, (2, n))),
              "rate": rng.uniform(-0.005, 0.06, (2, n)), "realized_vol": iv},
        turbulence=turbulence, turbulence_threshold=float(np.quantile(turbulence, 0.9)),
        splits={"train": (0, n), "validation": (0, n), "test": (0, n)},
        normalizer=Normalizer(FEATURE_NAMES, np.zeros(f), np.ones(f)), window=5, clock=detect_clock(dates),
        dividend_adjusted=np.array([True, False]), broad_index=np.array([True, False]),
    )


INTRADAY_MARKET = MarketConfig(expiries_days=[1, 3], term_reversion=2.0, iv_smile=2.0)
INTRADAY_ACCOUNT = EnvConfig(dtype="float64", initial_cash=100_000.0, position_frac=0.1, episode_length=80)


def test_the_batched_env_agrees_with_the_reference_on_intraday_bars_and_short_expiries():
    """Hourly bars open at the previous bar's close (stale at a session's first bar); 1- and 3-day options, often
    listed for a weekend day or for the data's hole, expire at the last session's 16:00 close before it, some on
    the bar that buys them; short maturities reach the vol surface's wings."""
    checked = agree_with_reference(intraday_market(), INTRADAY_MARKET, INTRADAY_ACCOUNT)
    assert checked["stale_fills"] > 100 and checked["open_fills"] > 2000 and checked["episodes"] > 20, checked
    assert checked["expiries"] > 200 and checked["early_expiries"] > 50 and checked["capped_buys"] > 20, checked
    assert checked["budget_bound"] > 100 and checked["same_bar_buys"] > 0 and checked["expiry_sales"] > 0, checked
    assert checked["sales"] > 300 and checked["short_expiries_itm"] >= 20 and checked["short_expiries_otm"] >= 20, \
        checked
    assert checked["covered_marks"] > 100 and checked["margin_calls"] >= 5, checked


# Mutants: references that each break one rule of docs/MARKET.md section 1. The agreement test must catch each.
ATM_YEARS = 30 / 365


class OpensEvenWhenStale(ReferenceMarket):
    def fill_point(self, u):
        return Point(self.open[u], self.iv_open[u], self.rate[u - 1], self.open_time[u])


class ExpiresOnCalendarDays(ReferenceMarket):
    """Expires at the first bar on or after the listed day, not the last one on or before it."""
    def expiry(self, u, days):
        listed, bar, time = super().expiry(u, days)
        if bar is not None and self.day[bar] < listed:
            bar += 1
            time = self.close_time[bar]
        return listed, bar, time


class CountsDaysToTheListedDay(ReferenceMarket):
    def expiry(self, u, days):
        listed, bar, _ = super().expiry(u, days)
        return listed, bar, self.close_time[u] + days


class RateOfTheFillDay(ReferenceMarket):
    def fill_point(self, u):
        point = super().fill_point(u)
        point.rate = self.rate[u]
        return point


class VolOfThePreviousClose(ReferenceMarket):
    def fill_point(self, u):
        point = super().fill_point(u)
        point.atm = point.atm if point.stale else self.iv_close[u - 1]
        return point


class OpensAtThePreviousClose(ReferenceMarket):
    def __init__(self, *args):
        super().__init__(*args)
        self.open_time = [self.close_time[0], *self.close_time[:-1]]


class VolumeOfTheFillBar(ReferenceMarket):
    def strike_volume(self, t, strike, spot, years):
        return super().strike_volume(t + 1, strike, spot, years)


class FlatTermStructure(ReferenceMarket):
    def atm_at(self, atm30, years):
        return atm30


class SkewNotScaledByMaturity(ReferenceMarket):
    def vol(self, atm30, strike, spot, years):
        return super().vol(atm30, strike, spot, ATM_YEARS)


class OneSkewForBothWings(ReferenceMarket):  # the surface before 2026-11-27
    def __init__(self, *args):
        super().__init__(*args)
        self.m = dataclasses.replace(self.m, iv_call_skew=self.m.iv_skew)


class NoWings(ReferenceMarket):
    def __init__(self, *args):
        super().__init__(*args)
        self.m = dataclasses.replace(self.m, iv_wing_z=math.inf)


class NoVolumeCap(ReferenceMarket):
    def __init__(self, *args):
        super().__init__(*args)
        self.c = copy.copy(self.c)
        object.__setattr__(self.c, "max_volume_share", 1e9)  # past the setting's limit on purpose: no cap


class StockRatesForTheIndex(ReferenceMarket):
    def __init__(self, data, market, sym):
        super().__init__(data, market, sym)
        self.margin_a, self.margin_b = market.stock_margin


class QuotesOffTheTickGrid(ReferenceMarket):
    def __init__(self, data, market, sym):
        super().__init__(data, market, sym)
        self.ticks = [0.0, 0.0]


class StockTicksForTheIndex(ReferenceMarket):
    def __init__(self, data, market, sym):
        super().__init__(data, market, sym)
        self.ticks = market.costs.stock_ticks


class OneTickAtEveryPrice(ReferenceMarket):
    """The small tick above tick_break too ($0.05 for a $25 SPX option, where Cboe quotes it in dimes)."""
    def __init__(self, data, market, sym):
        super().__init__(data, market, sym)
        self.ticks = [self.ticks[0], self.ticks[0]]


# References whose account, not whose market, breaks a rule.
class ForgetsTheDividend(ReferenceCopy):
    def carry(self, t, u):
        years = (self.mk.close_time[u] - self.mk.close_time[t]) / 365.0
        self.cash *= math.exp(self.mk.rate[t] * years)


class PaysNoInterest(ReferenceCopy):
    def carry(self, t, u):
        years = (self.mk.close_time[u] - self.mk.close_time[t]) / 365.0
        self.cash += self.shares * self.mk.close[t] * math.expm1(self.mk.q * years)


class InterestAtTheFillBarsRate(ReferenceCopy):
    def carry(self, t, u):
        years = (self.mk.close_time[u] - self.mk.close_time[t]) / 365.0
        self.cash = self.cash * math.exp(self.mk.rate[u] * years) \
            + self.shares * self.mk.close[t] * math.expm1(self.mk.q * years)


class NoCoveredCallOffset(ReferenceCopy):
    def margin_at_close(self):
        shares, self.shares = self.shares, 0.0
        try:
            return super().margin_at_close()
        finally:
            self.shares = shares


class MarginCallClosesLongsToo(ReferenceCopy):
    def called(self, p):
        return True


class MarginCallOnEquity(ReferenceCopy):
    def margin_call(self):
        return self.equity < self.margin


class BuysBackAtTheBid(ReferenceCopy):
    """Pays the bid side (mid less the half spread, plus slippage) to buy a short back, not the ask."""
    def close_at(self, p, fill, t):
        if not p.short:
            return super().close_at(p, fill, t)
        mk = self.mk
        mid, vol = mk.price(p.call, p.strike, p.expiry_time, fill)
        volume = mk.strike_volume(t, p.strike, fill.spot, mk.years(p.expiry_time, fill.time))
        half = mk.half_spread(mid, vol, p.strike, fill.spot)
        return -self.trade(mid, -half, p.contracts, volume, sell=False)


class SaleSizedByItsPremium(ReferenceCopy):
    def sale_unit(self, quote, fill):
        return quote.mid * (1 - quote.half) * self.m.multiplier


class SharesBeyondTheCashRoom(ReferenceCopy):
    def share_cap(self, price, bps):
        return self.shares + math.floor(max(self.cash, 0.0) / (price * (1 + bps)))


MUTANTS = [OpensEvenWhenStale, ExpiresOnCalendarDays, CountsDaysToTheListedDay, RateOfTheFillDay, VolOfThePreviousClose,
           OpensAtThePreviousClose, VolumeOfTheFillBar, FlatTermStructure, SkewNotScaledByMaturity, OneSkewForBothWings,
           NoWings, NoVolumeCap, StockRatesForTheIndex, QuotesOffTheTickGrid, StockTicksForTheIndex,
           OneTickAtEveryPrice, ForgetsTheDividend, PaysNoInterest, InterestAtTheFillBarsRate,
           NoCoveredCallOffset, MarginCallClosesLongsToo, MarginCallOnEquity, BuysBackAtTheBid, SaleSizedByItsPremium,
           SharesBeyondTheCashRoom]


# 30- and 60-day S&P 500 strikes stay inside the wings: only the intraday market's 1-day strikes reach them.
CASES = [(market, mutant) for mutant in MUTANTS for market in ("sp500", "intraday")
         if not (market == "sp500" and mutant is NoWings)]


@pytest.mark.parametrize("market_name, mutant", CASES, ids=lambda x: getattr(x, "__name__", x))
def test_a_reference_that_breaks_one_rule_no_longer_agrees(sp500_data, market_name, mutant):
    """On the S&P 500 a $300,000 account that sells often (margin calls come within the 40 bars), on the intraday
    market its account with 32 copies (16 at random starts saw no margin call on a long), over 40 bars."""
    args = ((sp500_data, MarketConfig(), SP500_MARGIN, 40, 16, torch.linspace(1500, 1880, 16).round().long())
            if market_name == "sp500" else (intraday_market(), INTRADAY_MARKET, INTRADAY_ACCOUNT, 40, 32))
    which = {"reference_copy" if issubclass(mutant, ReferenceCopy) else "reference_market": mutant}
    with pytest.raises(AssertionError):
        agree_with_reference(*args, weights=SELLS, **which)


class NoNotionalCapOnOrders(ReferenceCopy):
    def notional_limit(self, fill):
        return math.inf


class NotionalAtTheClose(ReferenceCopy):
    def notional_limit(self, fill):
        return math.floor(self.e.max_order_notional * self.equity / (self.mk.close[self.t] * self.m.multiplier))


class CapsCoveredCallsToo(ReferenceCopy):
    def covers(self, quote):
        in_cap = self.mk.close[self.t] * self.m.multiplier <= self.e.max_order_notional * self.equity
        return super().covers(quote) and in_cap


@pytest.mark.parametrize("mutant", [NoNotionalCapOnOrders, NotionalAtTheClose, CapsCoveredCallsToo],
                         ids=lambda m: m.__name__)
def test_a_reference_that_breaks_the_notional_cap_no_longer_agrees(sp500_data, mutant):
    """The cap sizes an order at its fill's spot (t+1's open, or its close after a stale open), not t's close, and
    leaves covered calls alone (the shares already hold their notional)."""
    with pytest.raises(AssertionError):
        agree_with_reference(sp500_data, MarketConfig(), NOTIONAL_CAP, starts=SP500_STARTS,
                             reference_copy=mutant, weights=SELLS)


def test_a_notional_cap_stops_cheap_options_coming_by_the_thousand(sp500_data):
    """June 2017, the VIX at 9.9: 5% of $1M in premium buys the 30-day 1.05 call (a mid of 9 cents a share, a
    ten-cent ask on the $0.05 grid) by the thousand and pays 6% of the order in commission. On the one-skew surface
    of the grids before 2026-11-27 (a fraction of a cent a share) it came by the 23,944, its volume cap, and its
    commission was 93% of the order: how 2016-18 ruined most agents of those grids (docs/RESULTS.md). With
    env.max_order_notional 1 every order holds at most the account's equity in the index: 4 contracts at 2,430, $43
    with their fees."""
    start = torch.tensor([int(np.searchsorted(sp500_data.dates, np.datetime64("2017-06-01")))])
    commission = COST_KINDS.index("commission")
    orders = {}
    for is_call, moneyness in ((True, 2), (True, 1), (False, 0)):  # the 1.05 and ATM calls, the 0.95 put
        for cap in (0.0, 1.0):
            env = BatchedOptionsEnv(sp500_data, "test", MarketConfig(), EnvConfig(dtype="float64",
                                    max_order_notional=cap), 1, seed=0, autoreset=False)
            obs = env.reset(start)
            equity = float(env.equity[0])
            action = env.actions.buy(is_call=is_call, moneyness_index=moneyness, expiry_index=0)
            assert bool(obs.mask[0, action])
            env.step(torch.tensor([action]))
            contracts, paid = float(env.contracts[0, 0]), float(env.entry_cost[0, 0])
            orders[is_call, moneyness, cap] = contracts, paid, float(env.costs_paid[commission, 0])
            if cap:  # the index's notional at the fill (the next open) within the equity at the decision's close
                spot = float(env.quotes.fill_px[0, int(start) + 1])
                assert contracts == math.floor(cap * equity / (spot * 100)) == 4
                assert orders[is_call, moneyness, cap][2] == pytest.approx(4 * CostConfig().commission_per_contract)
            else:
                assert contracts > 4
    contracts, paid, fees = orders[True, 2, 0.0]
    assert contracts > 4_000 and fees > 0.05 * paid  # thousands of contracts, their commission a cost that counts
    assert orders[True, 2, 1.0][1] < 50.0  # four of the same calls: tens of dollars, fees and all
    # A cap below one contract of the index (2016-18: 1,829 at its lowest close) would leave a stock-only agent.
    with pytest.warns(UserWarning, match=r"env.max_order_notional 0.1 x env.initial_cash 1,000,000 is below one "
                                         r"contract's notional \(182,9\d\d at the lowest close of the test split\)"):
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
    assert env.contracts[:3, 0].tolist() == [math.floor(c.max_volume_share * v) for v in proxy] == [11, 20, 10]
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


def test_gym_wrapper_matches_the_batched_env(synthetic_data):
    gym_env = OptionsTradingEnv(synthetic_data, split="train", dtype="float64", episode_length=60)
    batched = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), EnvConfig(dtype="float64",
                                episode_length=60), 1, seed=7, autoreset=False)
    obs, info = gym_env.reset(seed=7)
    b_obs = batched.reset()
    gen = torch.Generator().manual_seed(2)
    for _ in range(60):
        assert np.array_equal(obs["market"], b_obs.market[0].numpy())
        assert np.array_equal(obs["portfolio"], b_obs.portfolio[0].numpy())
        assert np.array_equal(info["action_mask"], b_obs.mask[0].numpy())
        action = random_valid(b_obs.mask, gen)
        obs, reward, terminated, truncated, info = gym_env.step(int(action[0]))
        result = batched.step(action)
        b_obs = result.obs
        assert reward == result.reward[0].item()
        if terminated or truncated:
            assert "episode_stats" in info
            break
    assert terminated or truncated


# The checker advises finite Box bounds; normalised features and portfolio values are unbounded by nature.
@pytest.mark.filterwarnings("ignore:.*Box observation space (minimum|maximum) value is:UserWarning")
def test_gym_wrapper_passes_the_env_checker_and_is_registered():
    env = gymnasium.make("clstm_ppo/OptionsTrading-v0", data="synthetic", window=10)
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert obs["market"].shape == (10, len(observed_feature_names(True)))  # the bar features and the option market's
    grid = len(MarketConfig().moneyness) * len(MarketConfig().expiries_days)
    # hold, buy and sell calls and puts, three targets for the underlying, three closes
    assert env.action_space.n == 1 + 4 * grid + len(MarketConfig().stock_targets) + 3 == 31
    assert info["action_mask"][0]


def test_stable_baselines3_trains_on_the_gymnasium_wrapper(synthetic_data):
    from sb3_contrib import MaskablePPO

    env = OptionsTradingEnv(synthetic_data, split="train", episode_length=40)
    model = MaskablePPO("MultiInputPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(128)  # MaskablePPO reads env.action_masks(): masked actions are never sampled
    obs, info = env.reset(seed=1)
    action, _ = model.predict(obs, action_masks=info["action_mask"], deterministic=True)
    assert info["action_mask"][int(action)]


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
