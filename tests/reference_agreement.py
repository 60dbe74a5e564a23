"""The batched env stepped beside tests/reference_env.py, one reference copy per env copy, on the same random valid
actions, and the accounts and markets the agreement tests and their mutants share (``test_env_reference.py``,
``test_env_mutants.py``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from env_trajectory import make
from reference_env import Layout, ReferenceCopy, ReferenceMarket

from clstm_ppo.config import EnvConfig, MarketConfig
from clstm_ppo.data import MarketData
from clstm_ppo.env import PORTFOLIO_FEATURES
from clstm_ppo.market import COST_KINDS

EXACT = EnvConfig(dtype="float64", initial_cash=1_000_000.0)
SELLS = {"sell": 3.0}
SP500_STARTS = torch.linspace(1500, 1880, 48).round().long()  # mid-2005 to 2007: stale opens come and go
SP500_MARGIN = EnvConfig(dtype="float64", initial_cash=300_000.0, position_frac=0.5)  # one contract's margin: ~$20k
# $135,000 of notional an order on $300,000: one contract of the index (1,180-1,560 over these bars) is $118k-$156k,
# so the cap cuts most orders to one contract and forbids any at times; a third of the orders are sales.
NOTIONAL_CAP = EnvConfig(dtype="float64", initial_cash=300_000.0, position_frac=0.2, max_order_notional=0.45)
INTRADAY_MARKET = MarketConfig(expiries_days=[1, 3], term_reversion=2.0, iv_smile=2.0)
INTRADAY_ACCOUNT = EnvConfig(dtype="float64", initial_cash=100_000.0, position_frac=0.1, episode_length=80)


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
            assert (closed, wins, margin_calls) == (ref.closed, ref.wins, ref.margin_calls), where
            assert shares == pytest.approx(ref.shares, rel=1e-12, abs=1e-12), where  # fractional shares round
            np.testing.assert_allclose(costs, [ref.costs[k] for k in COST_KINDS], rtol=1e-9, atol=1e-6, err_msg=where)
            checked["steps"] += 1
        for i in ended:
            refs[i] = follow(i)
            every_ref.append(refs[i])
    checked["closes"] = sum(ref.closed for ref in every_ref)
    for name in vars(every_ref[0].seen):
        checked[name] = sum(getattr(ref.seen, name) for ref in every_ref)
    return checked


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
