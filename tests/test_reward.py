"""env.reward: excess pays only what beats holding the underlying: the index held earns ~0, cash earns minus the
index's move, and every reward equals the change in equity less the index's total return on the same equity,
worked out here from the bars with numpy. env.reward: dsr pays Moody & Saffell's differential Sharpe ratio of the
bar's return over the T-bill, equal to a plain numpy recursion through episode restarts; cash earns 0; the
rewards stay finite, the step one graph, and a saved state (an older one included) resumes exactly."""
import dataclasses
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from env_trajectory import random_valid

from clstm_ppo.config import EnvConfig, MarketConfig
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.env import step as pure
from clstm_ppo.env.quotes import market_clock
from clstm_ppo.env.sharpe import differential_sharpe, min_variance, prior_variance, return_over_tbill


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


def test_excess_reward_is_the_equity_change_less_the_index_on_the_same_equity(sp500_data):
    market = MarketConfig()
    all_in = 1 + 4 * len(market.moneyness) * len(market.expiries_days) + market.stock_targets.index(1.0)
    env, rows = walk(sp500_data, "excess", all_in)
    assert env.actions.describe(all_in) == "underlying to 100%"
    t, equity, cash, after = rows[:, 0].astype(int), rows[:, 1], rows[:, 2], rows[:, 3]
    expected = ((after - equity - equity * index_returns(sp500_data, env, t)) * env.cfg.reward_scale
                / env.cfg.initial_cash)
    np.testing.assert_allclose(rows[:, 4], expected, rtol=1e-9, atol=1e-12)
    # From the bar after the fill on, buy-and-hold: whole shares and the cash left over, which earns the rate
    # where the index earns its return; that cash is all that differs from the benchmark.
    held = slice(1, None)
    gain_excess = rows[held, 4] * env.cfg.initial_cash / env.cfg.reward_scale
    r = index_returns(sp500_data, env, t[held])
    assert np.all(np.abs(gain_excess) <= cash[held] * (np.abs(r) + 1e-3) + 1e-6)
    assert cash[1] < 0.002 * equity[1], "all in: under one share's price left in cash (dividends add to it later)"
    # ~0: what is left is the dividends paid into cash (2-3% of equity by the end), which the index reinvests
    assert np.abs(gain_excess).mean() < 0.03 * np.abs(equity[held] * r).mean(), "owning the index earns ~0"


def test_cash_is_paid_minus_the_index_and_the_equity_reward_is_unchanged(sp500_data):
    env, excess = walk(sp500_data, "excess", None, steps=120)
    _, plain = walk(sp500_data, "equity", None, steps=120)
    r = index_returns(sp500_data, env, excess[:, 0].astype(int))
    scale = env.cfg.reward_scale / env.cfg.initial_cash
    np.testing.assert_allclose(plain[:, 4], (plain[:, 3] - plain[:, 1]) * scale, rtol=1e-12)
    np.testing.assert_allclose(excess[:, 4], plain[:, 4] - plain[:, 1] * r * scale, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- dsr: the differential Sharpe ratio

def dsr_numpy(returns: np.ndarray, starts: np.ndarray, eta: float, prior_vol: float) -> np.ndarray:
    """D_t of each bar, written out from Moody & Saffell (2001): moments A = 0, B = prior_vol^2 at every episode
    start, the variance in the denominator at least (prior_vol / 10)^2."""
    out = np.empty_like(returns)
    a = b = 0.0
    for i, (r, fresh) in enumerate(zip(returns, starts, strict=True)):
        if fresh:
            a, b = 0.0, prior_vol ** 2
        r = min(max(r, -1.0), 1.0)
        da, db = r - a, r * r - b
        out[i] = (b * da - 0.5 * a * db) / max(b - a * a, (prior_vol / 10) ** 2) ** 1.5
        a, b = a + eta * da, b + eta * db
    return out


def tbill(data, env, sym: np.ndarray, bars: np.ndarray) -> np.ndarray:
    """What cash earned from each bar's close to the next's: the bar's rate over the calendar time between."""
    close_time, _ = market_clock(data.dates.values)
    return np.expm1(env.quotes.inputs.rate[sym, bars] * (close_time[bars + 1] - close_time[bars]) / 365.0)


def test_dsr_of_a_hand_made_path_through_the_floor_and_the_clip():
    """300 bars of 0 (the variance decays below its floor), then a spike, a bar that turns the equity negative
    (R_t clipped to -1), one from nothing (start-of-bar equity 0: clipped to +1), then noise."""
    cfg = EnvConfig(dtype="float64", reward="dsr")
    spec = SimpleNamespace(cfg=cfg)  # what the reward reads of the spec: the settings
    rng = np.random.default_rng(0)
    r = np.concatenate([np.zeros(300), [0.05, -3.0, 0.0], rng.normal(0.0005, 0.01, 200)])
    prev = cfg.initial_cash * rng.uniform(0.5, 2.0, len(r))
    prev[303] = 0.0
    rate = rng.uniform(0.0, 2e-4, len(r))
    equity = prev * (1.0 + r + rate)
    equity[303] = 5_000.0
    moments, paid = torch.tensor([[0.0], [prior_variance(cfg)]], dtype=torch.float64), []
    for i in range(len(r)):
        as_tensor = partial(torch.tensor, dtype=torch.float64)
        got = return_over_tbill(spec, as_tensor([equity[i]]), as_tensor([prev[i]]), as_tensor([rate[i]]))
        d, moments = differential_sharpe(moments, got, cfg.dsr_rate, min_variance(cfg))
        paid.append(float(d[0]))
    with np.errstate(divide="ignore"):  # a return from nothing is +inf here, and the clip's
        excess = equity / prev - 1.0 - rate
    expected = dsr_numpy(excess, np.arange(len(r)) == 0, cfg.dsr_rate, cfg.dsr_prior_vol)
    np.testing.assert_allclose(paid, expected, rtol=1e-9, atol=1e-12)
    assert np.abs(paid[:300]).max() < 1e-9 and paid[300] > 10 and paid[301] < -100 and paid[303] > 1


def test_dsr_is_the_moody_saffell_recursion_through_episode_restarts(sp500_data):
    cfg = EnvConfig(dtype="float64", episode_length=15, reward="dsr", dsr_rate=0.1, dsr_prior_vol=0.004)
    env = BatchedOptionsEnv(sp500_data, "train", MarketConfig(), cfg, 1, seed=3, records=False)
    env.reset()
    state, gen, rows = env.state, torch.Generator().manual_seed(2), []
    for _ in range(50):  # three full episodes and a part, each restarted inside the step
        action = random_valid(state.mask, gen)
        out = pure.step(env.spec, state, action, keep_ended=True)
        rows.append((int(state.sym[0]), int(state.t[0]), bool(state.t[0] == state.t_start[0]),
                     float(state.equity[0]), float(out.ended.equity[0]), float(out.reward[0]),
                     bool(out.truncated[0] | out.terminated[0])))
        state = out.state
    sym, t, start, before, after, reward, ended = (np.array(c) for c in zip(*rows, strict=True))
    assert ended.sum() >= 3 and start[1:][ended[:-1]].all(), "each step after an end begins an episode"
    assert np.ptp(after / before) > 0.005, "the random actions moved the equity"
    r = after / before - 1.0 - tbill(sp500_data, env, sym, t)
    d = dsr_numpy(r, start, cfg.dsr_rate, cfg.dsr_prior_vol)
    np.testing.assert_allclose(reward, cfg.dsr_rate * cfg.reward_scale * d, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_an_all_cash_copy_earns_the_tbill_so_its_dsr_is_zero_and_finite(sp500_data, dtype):
    """Held in cash, R_t = 0: A stays 0, B decays from the prior (after ~290 bars at the default rate) below the
    floor on the variance, and D_t stays 0 to rounding, finite throughout."""
    cfg = EnvConfig(dtype=dtype, episode_length=400, reward="dsr")
    env = BatchedOptionsEnv(sp500_data, "train", MarketConfig(), cfg, 1, autoreset=False, records=False)
    env.reset(starts=torch.tensor([env.first_bar]))
    hold, rewards = torch.tensor([env.actions.hold]), []
    for _ in range(cfg.episode_length):
        rewards.append(float(env.step(hold).reward[0]))
    rewards = np.array(rewards)
    assert np.isfinite(rewards).all() and float(env.equity[0]) > cfg.initial_cash, "it earned interest"
    a, b = (float(x) for x in env.sharpe_moments[:, 0])
    assert b < min_variance(cfg), "the floor holds the denominator up"
    if dtype == "float64":
        assert np.abs(rewards).max() < 1e-9 and abs(a) < 1e-15
        assert b == pytest.approx(cfg.dsr_prior_vol ** 2 * (1 - cfg.dsr_rate) ** len(rewards), rel=1e-6)
    else:  # a float32 account of $1M carries its interest to ~6 cents: R_t of ~1e-7, D_t of ~1e-4
        assert np.abs(rewards).max() < 1e-3 and abs(a) < 1e-6


def test_dsr_rewards_stay_finite_for_random_actions_on_many_float32_copies(synthetic_data):
    """Large positions and no ruin stop: equity swings hard and may nearly vanish, where R_t is clipped."""
    cfg = EnvConfig(episode_length=40, reward="dsr", position_frac=0.5, ruin_fraction=0.0)
    env = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), cfg, 256, seed=9, records=False)
    obs, gen, rewards = env.reset(), torch.Generator().manual_seed(1), []
    for _ in range(200):
        result = env.step(random_valid(obs.mask, gen))
        obs = result.obs
        rewards.append(result.reward)
    rewards = torch.stack(rewards)
    assert rewards.dtype == torch.float32 and torch.isfinite(rewards).all()
    assert torch.isfinite(env.sharpe_moments).all() and rewards.abs().mean() > 1e-3
    assert 0.01 < rewards.abs().median() < 1.0, "a typical bar pays what the equity reward's would (~0.01-0.1)"


def test_the_dsr_step_is_one_graph(synthetic_data):
    import torch._dynamo

    cfg = EnvConfig(episode_length=6, reward="dsr")
    env = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), cfg, 16, seed=4, records=False)
    env.reset()
    dense = dataclasses.replace(env.spec, gather_closes=False)  # what compiled_step traces: no host sync
    explained = torch._dynamo.explain(lambda s, a: pure.step(dense, s, a))(env.state, torch.zeros(16, dtype=torch.long))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def flat(state) -> dict[str, torch.Tensor]:
    d = state.to_dict()
    return {**{k: v for k, v in d.items() if k != "stats"}, **{f"stats.{k}": v for k, v in d["stats"].items()}}


def resumes_exactly(data, cfg: EnvConfig, saved_as=lambda saved: saved) -> None:
    """Step an env into its episodes, load its saved state (as ``saved_as`` leaves it) into a fresh env, and
    step both on with the same actions through restarts: every field and reward equal, bit for bit."""
    original = BatchedOptionsEnv(data, "train", MarketConfig(), cfg, 24, seed=1, records=False)
    restored = BatchedOptionsEnv(data, "train", MarketConfig(), cfg, 24, seed=77, records=False)
    obs, gen = original.reset(), torch.Generator().manual_seed(0)
    for _ in range(7):
        obs = original.step(random_valid(obs.mask, gen)).obs
    saved = saved_as(original.state_dict())
    assert restored.fits(saved)
    restored.load_state_dict(saved)
    for _ in range(30):
        action = random_valid(obs.mask, gen)
        first = original.step(action)
        obs = first.obs
        assert torch.equal(first.reward, restored.step(action).reward)
        for k, v in flat(original.state).items():
            assert torch.equal(v, flat(restored.state)[k]), k


def test_a_saved_dsr_state_continues_exactly_through_restarts(synthetic_data):
    resumes_exactly(synthetic_data, EnvConfig(dtype="float32", episode_length=9, reward="dsr"))


def without_moments(saved: dict) -> dict:
    """A state as saved before the Sharpe ratio moments existed."""
    return {k: v for k, v in saved.items() if k != "sharpe_moments"}


@pytest.mark.parametrize("reward", ["equity", "excess"])
def test_a_state_saved_before_dsr_still_fits_and_resumes_exactly(synthetic_data, reward):
    resumes_exactly(synthetic_data, EnvConfig(dtype="float64", episode_length=9, reward=reward), without_moments)


def test_a_dsr_state_and_another_rewards_state_do_not_fit_each_other(synthetic_data):
    def env(reward: str) -> BatchedOptionsEnv:
        return BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), EnvConfig(reward=reward), 4, records=False)

    dsr, equity = env("dsr"), env("equity")
    for saved in (equity.state_dict(), without_moments(equity.state_dict())):
        assert not dsr.fits(saved), "a dsr env needs its moments"
    assert not equity.fits(dsr.state_dict())
    with pytest.raises(ValueError, match="does not fit"):
        dsr.load_state_dict(without_moments(equity.state_dict()))
