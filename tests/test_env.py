import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import clstm_ppo  # noqa: F401  (registers the gymnasium id)
from clstm_ppo.config import DataConfig, EnvConfig, MarketConfig, SyntheticConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv
from clstm_ppo.env.gym_env import OptionsTradingEnv
from clstm_ppo.market import COST_KINDS, bs_price
from market_fixtures import handmade_market

EXACT = EnvConfig(dtype="float64", initial_cash=1_000_000.0)


@pytest.fixture(scope="module")
def synthetic_data():
    return build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=1500, seed=5)))


def random_valid(mask: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.multinomial(mask.double(), 1, generator=gen).squeeze(-1)


def independent_marks(env: BatchedOptionsEnv) -> torch.Tensor:
    """Mark every open position again from the env's state with the plain pricing function."""
    m = env.market_cfg
    spot = env.close_px[env.sym, env.t].expand_as(env.strike)  # positions are (P, N): slot-major
    strike = torch.where(env.active, env.strike, spot)
    atm = env.atm_iv[env.sym, env.t]
    iv = (atm * (1 - m.iv_skew * torch.log(strike / spot))).clamp(m.min_iv, m.max_iv)
    price = bs_price(spot, strike, env.dte.clamp_min(0) / 365.0, m.risk_free_rate, m.dividend_yield, iv, env.is_call)
    return torch.where(env.active, price * env.contracts * m.multiplier, torch.zeros_like(price)).sum(0)


def test_invariants_on_random_rollouts_of_1000_copies(synthetic_data):
    env = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), EXACT, num_envs=1000, seed=1)
    obs = env.reset()
    gen = torch.Generator().manual_seed(0)
    turbulent_col = PORTFOLIO_FEATURES.index("turbulent")
    last_costs = env.costs_paid.clone()
    seen = {"opened": 0, "closed": 0, "expired_or_closed": 0, "turbulent": 0, "episodes": 0}
    for _ in range(300):
        turbulent = obs.portfolio[:, turbulent_col] > 0.5
        assert not obs.mask[turbulent][:, 1:1 + 2 * env.actions.grid_size].any(), "nothing opens when turbulent"
        action = random_valid(obs.mask, gen)
        before_open = env.active.sum(0)
        result = env.step(action)
        obs = result.obs
        done = result.terminated | result.truncated
        live = ~done  # copies that were auto-reset start afresh: compare the others
        assert torch.allclose(env.equity, env.cash + independent_marks(env), rtol=1e-12, atol=1e-6)
        assert (env.cash >= 0).all()
        assert (env.costs_paid >= 0).all()
        assert (env.costs_paid[:, live] >= last_costs[:, live] - 1e-9).all(), "costs only ever accumulate"
        assert (env.active[:, turbulent & live].sum(0) == 0).all(), "everything closes after a turbulent bar"
        last_costs = env.costs_paid.clone()
        seen["turbulent"] += int(turbulent.sum())
        seen["opened"] += int((env.active.sum(0) > before_open).sum())
        seen["episodes"] += 0 if result.episodes is None else len(result.episodes["return"])
        if result.episodes is not None:
            ep = result.episodes
            assert (ep["wins"] <= ep["closed"]).all() and (ep["costs"] >= 0).all()
            assert np.allclose([c[-1] for c in ep["equity_curve"]], ep["return"] + EXACT.initial_cash)
    assert seen["turbulent"] > 100 and seen["opened"] > 1000 and seen["episodes"] > 100, seen


# Rich: cash never binds. Tight: a $5,000 account where the budget and the cash room decide most buys.
@pytest.mark.parametrize("env_cfg", [EXACT, EnvConfig(dtype="float64", initial_cash=5_000.0, position_frac=0.2)],
                         ids=["rich", "tight"])
def test_the_batched_env_agrees_with_a_plain_python_reference_step_by_step(synthetic_data, env_cfg):
    """Every copy's observed portfolio and action mask, then its cash, equity, reward, costs by kind, closes and
    wins after each step, against tests/reference_env.py."""
    from reference_env import ReferenceCopy

    market = MarketConfig()
    env = BatchedOptionsEnv(synthetic_data, "train", market, env_cfg, num_envs=48, seed=3)
    obs = env.reset()
    a = env.actions
    grid = [(m, float(e)) for e in market.expiries_days for m in market.moneyness]  # moneyness fastest
    turbulent = synthetic_data.turbulence > synthetic_data.turbulence_threshold
    refs = {i: ReferenceCopy(synthetic_data.bars, synthetic_data.dates.values, turbulent,
                             int(env.sym[i]), int(env.t[i]), int(env.t_end[i]), market, env_cfg)
            for i in range(env.num_envs)}
    gen = torch.Generator().manual_seed(0)
    checked = {"steps": 0, "closes": 0, "episodes": 0, "budget_bound": 0}
    for _ in range(120):
        for i, ref in refs.items():
            mask = ref.mask(grid)
            assert obs.mask[i].tolist() == mask, i
            np.testing.assert_allclose(obs.portfolio[i].numpy(), ref.portfolio(), rtol=2e-6, atol=1e-7,
                                       err_msg=f"copy {i}: {PORTFOLIO_FEATURES}")
            calm_and_free = len(ref.open_positions()) < env_cfg.max_positions and not turbulent[ref.t]
            checked["budget_bound"] += calm_and_free and not all(mask[1:1 + len(grid) * 2])
        action = random_valid(obs.mask, gen)
        rewards = {i: ref.step(int(action[i]), grid, a.close_all, a.close_worst, a.close_best)
                   for i, ref in refs.items()}
        result = env.step(action)
        obs = result.obs
        ended = {} if result.episodes is None else {int(i): k for k, i in enumerate(result.episodes["env"])}
        for i, ref in list(refs.items()):
            if i in ended:  # the env has already started a new episode there: compare the one that ended
                ep, k = result.episodes, ended[i]
                equity, closed, wins, costs = ep["return"][k] + env_cfg.initial_cash, ep["closed"][k], ep["wins"][k], \
                    ep["costs"][k]
                del refs[i]
                checked["episodes"] += 1
                checked["closes"] += ref.closed
            else:
                equity, closed, wins, costs = (float(env.equity[i]), float(env.stats["closed"][i]),
                                               float(env.stats["wins"][i]), env.costs_paid[:, i].numpy())
                assert float(env.cash[i]) == pytest.approx(ref.cash, rel=1e-9, abs=1e-6), i
                assert int(env.active[:, i].sum()) == len(ref.open_positions()), i
            assert equity == pytest.approx(ref.equity, rel=1e-9, abs=1e-6), i
            assert float(result.reward[i]) == pytest.approx(rewards[i], rel=1e-7, abs=1e-12), i
            assert (closed, wins) == (ref.closed, ref.wins), i
            np.testing.assert_allclose(costs, [ref.costs[k] for k in COST_KINDS], rtol=1e-9, atol=1e-6)
            checked["steps"] += 1
    checked["closes"] += sum(ref.closed for ref in refs.values())
    assert checked["steps"] > 1500 and checked["episodes"] > 10 and checked["closes"] > 200, checked
    if env_cfg.initial_cash < 10_000:
        assert checked["budget_bound"] > 200, checked  # the tight account really is limited by its cash


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


def test_round_trip_at_unchanged_underlying_loses_exactly_the_itemised_costs():
    data = handmade_market(np.full(40, 100.0))
    env = BatchedOptionsEnv(data, "train", MarketConfig(), EnvConfig(dtype="float64", episode_length=0), 1, seed=0)
    env.gap_days.zero_()  # no time passes: an unchanged underlying means unchanged option values
    obs = env.reset()
    start = env.equity.clone()
    buy = env.actions.buy(is_call=True, moneyness_index=1, expiry_index=0)
    assert obs.mask[0, buy]
    env.step(torch.tensor([buy]))
    assert env.active.sum() == 1
    after_buy = env.costs_paid.clone()
    assert (start - env.equity).item() == pytest.approx(after_buy.sum().item(), rel=1e-12)  # marked at mid
    env.step(torch.tensor([env.actions.close_all]))
    assert env.active.sum() == 0 and env.stats["closed"].item() == 1 and env.stats["wins"].item() == 0
    total = env.costs_paid.sum().item()
    assert (start - env.equity).item() == pytest.approx(total, rel=1e-12)
    assert (start - env.cash).item() == pytest.approx(total, rel=1e-12)
    assert env.costs_paid[COST_KINDS.index("sec_fee"), 0] > 0 and env.costs_paid[COST_KINDS.index("spread"), 0] > 0


def test_an_expired_option_pays_its_intrinsic_value():
    close = np.concatenate([np.full(5, 100.0), np.linspace(100.0, 112.0, 31), np.full(10, 112.0)])
    data = handmade_market(close)
    env = BatchedOptionsEnv(data, "train", MarketConfig(expiries_days=[30]), EnvConfig(dtype="float64",
                            episode_length=0), 1, seed=0)
    env.reset()  # the episode starts at bar window-1 = 2
    env.step(torch.tensor([env.actions.buy(is_call=True, moneyness_index=0, expiry_index=0)]))  # fills at bar 3
    strike, contracts = env.strike[0, 0].item(), env.contracts[0, 0].item()
    assert strike == 95.0 and contracts > 0
    cash = env.cash.item()
    for _ in range(29):
        env.step(torch.tensor([0]))
    assert env.active.sum() == 1 and env.cash.item() == cash  # bar 32: one day left
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
    obs = env.step(torch.tensor([buy])).obs  # masked: held instead; forced closes fill at bar 7's open
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
    assert obs["market"].shape == (10, len(clstm_ppo.data.FEATURE_NAMES))
    assert env.action_space.n == 16 and info["action_mask"][0]


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
        np.testing.assert_array_equal(env.windows(obs.row).numpy(), expected)  # what the update replays
        obs = env.step(random_valid(obs.mask, gen)).obs
    assert len(set(env.sym.tolist())) == 3


def test_optional_reward_shaping_subtracts_exactly_its_terms(synthetic_data):
    """Twin envs on the same actions: the shaped reward differs by the drawdown and turbulence terms only."""
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
        turbulent = shaped.turbulent_bar[shaped.t] & shaped.active.any(0)
        expected = a.reward - 0.3 * drawdown - 0.05 * turbulent.double()
        torch.testing.assert_close(b.reward[live], expected[live], rtol=0, atol=1e-12)
        penalised += int((turbulent & live).sum())
    assert penalised > 50
