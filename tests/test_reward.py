"""env.reward: excess pays only what beats holding the underlying: the index held earns ~0, cash earns minus the
index's move, and every reward equals the change in equity less the index's total return on the same equity,
worked out here from the bars with numpy."""
import numpy as np
import pytest
import torch

from clstm_ppo.config import DataConfig, EnvConfig, MarketConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.env.quotes import market_clock


@pytest.fixture(scope="module")
def sp500():
    return build_market_data(DataConfig())


def walk(data, reward: str, first: int | None, steps: int = 300):
    """One copy over the training split: ``first`` on the first bar (None: hold), then hold."""
    cfg = EnvConfig(dtype="float64", episode_length=0, ruin_fraction=0.0, reward=reward)
    env = BatchedOptionsEnv(data, "train", MarketConfig(), cfg, 1, autoreset=False)
    env.reset(starts=torch.tensor([env.first_bar]))
    rows = []
    for _ in range(steps):
        t, equity, cash = int(env.t[0]), float(env.equity[0]), float(env.cash[0])
        action = first if first is not None and not rows else env.actions.hold
        result = env.step(torch.tensor([action]))
        rows.append((t, equity, cash, float(env.equity[0]), float(result.reward[0])))
    return env, np.array(rows)


def index_returns(data, env, bars: np.ndarray) -> np.ndarray:
    close = data.bars["close"][0]
    close_time, _ = market_clock(data.dates.values)
    q = env.quotes.inputs.dividend_yield[0]
    years = (close_time[bars + 1] - close_time[bars]) / 365.0
    return close[bars + 1] / close[bars] - 1.0 + np.expm1(q * years)


def test_excess_reward_is_the_equity_change_less_the_index_on_the_same_equity(sp500):
    market = MarketConfig()
    all_in = 1 + 4 * len(market.moneyness) * len(market.expiries_days) + market.stock_targets.index(1.0)
    env, rows = walk(sp500, "excess", all_in)
    assert env.actions.describe(all_in) == "underlying to 100%"
    t, equity, cash, after = rows[:, 0].astype(int), rows[:, 1], rows[:, 2], rows[:, 3]
    expected = (after - equity - equity * index_returns(sp500, env, t)) * env.cfg.reward_scale / env.cfg.initial_cash
    np.testing.assert_allclose(rows[:, 4], expected, rtol=1e-9, atol=1e-12)
    # From the bar after the fill on, buy-and-hold: whole shares and the cash left over, which earns the rate
    # where the index earns its return; that cash is all that differs from the benchmark.
    held = slice(1, None)
    gain_excess = rows[held, 4] * env.cfg.initial_cash / env.cfg.reward_scale
    r = index_returns(sp500, env, t[held])
    assert np.all(np.abs(gain_excess) <= cash[held] * (np.abs(r) + 1e-3) + 1e-6)
    assert cash[1] < 0.002 * equity[1], "all in: under one share's price left in cash (dividends add to it later)"
    # ~0: what is left is the dividends paid into cash (2-3% of equity by the end), which the index reinvests
    assert np.abs(gain_excess).mean() < 0.03 * np.abs(equity[held] * r).mean(), "owning the index earns ~0"


def test_cash_is_paid_minus_the_index_and_the_equity_reward_is_unchanged(sp500):
    env, excess = walk(sp500, "excess", None, steps=120)
    _, plain = walk(sp500, "equity", None, steps=120)
    r = index_returns(sp500, env, excess[:, 0].astype(int))
    scale = env.cfg.reward_scale / env.cfg.initial_cash
    np.testing.assert_allclose(plain[:, 4], (plain[:, 3] - plain[:, 1]) * scale, rtol=1e-12)
    np.testing.assert_allclose(excess[:, 4], plain[:, 4] - plain[:, 1] * r * scale, rtol=1e-9, atol=1e-12)
