"""The env step as a pure function: the sync-free step (what compiled code and GPUs run) agrees with the eager env
over long trajectories and resumes bit for bit; the same run twice gives the same bits; no changed input; one
compiled graph with no break or recompile; device-side episode sums equal to the host's records; random draws that
are uniform, per copy and resumable. Both paths agree with the plain-Python reference env (test_env_reference.py)."""
import dataclasses

import numpy as np
import pytest
import torch
from env_trajectory import CASES, STATE, STATS, data_config, draw_action, make, make_sync_free, random_valid, run, start
from scipy import stats as scipy_stats

from clstm_ppo.config import DataConfig, EnvConfig, MarketConfig, SyntheticConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.env import step as pure
from clstm_ppo.env.draws import integers, mix32
from clstm_ppo.env.state import STATE_FIELDS
from clstm_ppo.metrics import concat_episodes, episode_sums


@pytest.fixture(scope="module")
def datasets():
    return {source: build_market_data(data_config(next(c for c in CASES if c.source == source)))
            for source in {c.source for c in CASES}}


def same_bits(a, b) -> bool:
    """Equal, NaN where NaN; -0.0 equals 0.0."""
    return torch.equal(torch.nan_to_num(a, nan=7.0), torch.nan_to_num(b, nan=7.0))


def agree(x, y, where: str, rtol: float = 1e-9, atol: float = 1e-7) -> None:
    """Floats to tolerance, everything else exactly (a cheap check first: this runs ~40,000 times a case)."""
    if not x.is_floating_point():
        assert torch.equal(x, y), where
    elif not torch.allclose(y, x, rtol=rtol, atol=atol, equal_nan=True):
        torch.testing.assert_close(y, x, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{where}: {m}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_sync_free_step_agrees_with_the_eager_env_and_resumes_bit_for_bit(datasets, case):
    """600 steps in float64 of the eager env and of the sync-free step (every copy priced at a close, no host
    sync: what compiled code and GPUs run, here eagerly) on the same actions. Bars, positions, flags, masks and
    counts are equal at every step; money, marks, Greeks, rewards and observations agree to 1e-9 (the two price
    closes in batches of other shapes, so their last bits may differ). For the last 200 steps, the sync-free env's
    saved state runs on in a fresh env made with another seed, which steps bit for bit as the one it came from."""
    data = datasets[case.source]
    eager, obs = start(case, make, data)
    sync_free, _ = start(case, make_sync_free, data)
    resumed = None
    gen = torch.Generator().manual_seed(case.seed)
    for step_number in range(600):
        if step_number == 400:
            resumed, _ = start(case, make_sync_free, data, seed=case.seed + 1000)
            resumed.load_state_dict(sync_free.state_dict())
        action = draw_action(case, obs.mask, eager.actions.n, gen)
        a, b = eager.step(action), sync_free.step(action)
        where = f"{case.name}, step {step_number}"
        for name in STATE:
            agree(getattr(eager, name), getattr(sync_free, name), f"{where}: {name}")
        for name in STATS:
            agree(eager.stats[name], sync_free.stats[name], f"{where}: {name}", atol=1e-9)
        agree(a.reward, b.reward, f"{where}: reward", atol=1e-12)
        agree(a.obs.portfolio, b.obs.portfolio, f"{where}: portfolio", rtol=1e-5, atol=1e-6)  # float32
        for x, y in ((a.obs.mask, b.obs.mask), (a.obs.row, b.obs.row), (a.obs.start, b.obs.start),
                     (a.terminated, b.terminated), (a.truncated, b.truncated)):
            assert torch.equal(x, y), where
        if resumed is not None:
            c = resumed.step(action)
            for name, value in flat(sync_free.state).items():
                assert same_bits(flat(resumed.state)[name], value), f"{where}: resumed {name}"
            assert same_bits(b.reward, c.reward) and same_bits(b.obs.portfolio, c.obs.portfolio), where
        obs = a.obs
    assert resumed is not None


def test_the_same_run_twice_gives_the_same_bits(datasets):
    """Determinism on this machine: two envs of one case on the same actions (any action, valid or not) hash alike
    over every state tensor, reward, observation and episode record, on the eager path and on the sync-free one."""
    case = next(c for c in CASES if c.actions == "wild")
    for make_env in (make, make_sync_free):
        assert run(case, make_env, datasets[case.source], steps=250) == \
            run(case, make_env, datasets[case.source], steps=250)


def flat(state) -> dict[str, torch.Tensor]:
    d = state.to_dict()
    return {**{k: v for k, v in d.items() if k != "stats"}, **{f"stats.{k}": v for k, v in d["stats"].items()}}


def test_the_step_changes_no_input_and_the_same_input_gives_the_same_output(synthetic_data):
    env = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), EnvConfig(dtype="float64", episode_length=10), 64,
                            seed=2, records=False)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    state = env.state
    for _ in range(40):  # through episode ends and restarts
        before = {k: v.clone() for k, v in flat(state).items()}
        action = random_valid(state.mask, gen)
        first, again = pure.step(env.spec, state, action), pure.step(env.spec, state, action)
        for k, v in flat(state).items():
            assert torch.equal(v, before[k]), f"the step changed its input's {k}"
        for k, v in flat(first.state).items():
            assert torch.equal(v, flat(again.state)[k]), k
        state = first.state
    assert set(STATE_FIELDS) == set(state.to_dict())


def test_device_episode_sums_equal_the_host_records_of_the_same_episodes(synthetic_data):
    """What the trainer logs (summed on the device, read once per update) equals metrics.episode_sums of the
    per-episode records the host tools read, staggered first episodes left out of both."""
    cfg = EnvConfig(dtype="float64", episode_length=12)
    env = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), cfg, 96, seed=5)
    obs, gen, records = env.reset(), torch.Generator().manual_seed(3), []
    for _ in range(60):
        result = env.step(random_valid(obs.mask, gen))
        obs = result.obs
        records.append(result.episodes)
    host = episode_sums(concat_episodes(records))
    assert host[0] > 100, "enough full-length episodes ended"
    np.testing.assert_allclose(env.take_episode_sums(), host, rtol=1e-12, atol=1e-6)
    assert not env.take_episode_sums().any(), "a take clears the sums"


def test_each_copy_draws_its_own_starts_whatever_the_others_do(synthetic_data):
    """A copy's k-th episode start depends on its key and k alone: copies that end on other steps (other
    actions) leave it unchanged, so a rank's copies do not depend on each other's luck."""
    cfg = EnvConfig(dtype="float64", episode_length=8, ruin_fraction=0.0, stagger_starts=False)
    a, b = (BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), cfg, 16, seed=9) for _ in range(2))
    a.reset(), b.reset()
    hold = torch.zeros(16, dtype=torch.long)
    starts_a, starts_b = [], []
    for _ in range(30):
        a.step(hold)
        b.step(hold)
        starts_a.append(a.t_start.clone())
        starts_b.append(b.t_start.clone())
    assert torch.equal(torch.stack(starts_a), torch.stack(starts_b))
    expected = integers(a.key, torch.full_like(a.draws, 3), "start", a.first_bar, a.spec.latest_start)
    assert torch.equal(starts_a[-1], expected), "after 3 episodes of 8 bars the 4th start is draw 3"


def test_draws_are_uniform_and_independent_of_neighbours():
    x = torch.arange(2 ** 16, dtype=torch.long)
    assert len(torch.unique(mix32(x))) == len(x), "the mixer is a bijection"
    keys = mix32(torch.arange(4000, dtype=torch.long) ^ 12345)
    for count in (0, 1, 17):
        bars = integers(keys, torch.full_like(keys, count), "start", 100, 139)  # 40 bars
        observed = torch.bincount(bars - 100, minlength=40).numpy()
        assert scipy_stats.chisquare(observed).pvalue > 1e-3
    u = integers(keys, torch.zeros_like(keys), "start", 0, 999).double()
    v = integers(keys, torch.ones_like(keys), "start", 0, 999).double()
    w = integers(keys, torch.zeros_like(keys), "symbol", 0, 999).double()
    for other in (v, w):  # the next draw and another stream are uncorrelated with this one
        assert abs(np.corrcoef(u.numpy(), other.numpy())[0, 1]) < 0.06


def test_a_restored_state_continues_exactly_through_restarts(synthetic_data):
    cfg = EnvConfig(dtype="float64", episode_length=9)
    original = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), cfg, 24, seed=1, records=False)
    restored = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), cfg, 24, seed=77, records=False)
    obs, gen = original.reset(), torch.Generator().manual_seed(0)
    for _ in range(7):
        obs = original.step(random_valid(obs.mask, gen)).obs
    restored.load_state_dict(original.state_dict())
    for _ in range(30):
        action = random_valid(obs.mask, gen)
        obs = original.step(action).obs
        restored.step(action)
        for k, v in flat(original.state).items():
            assert torch.equal(v, flat(restored.state)[k]), k


def test_the_step_compiles_to_one_graph_and_agrees_with_eager(synthetic_data):
    """fullgraph: no graph break (a .item(), nonzero or boolean index would break it); dynamo's explain sees one
    graph; a rollout does not recompile; each compiled step agrees with the eager one from the same state."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    # The env of the next test, whose graph is then read from inductor's cache: a cold CI machine compiles it once.
    cfg = EnvConfig(dtype="float64", episode_length=6)
    env = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), cfg, 16, seed=4, records=False)
    env.reset()
    action = torch.zeros(16, dtype=torch.long)
    dense = dataclasses.replace(env.spec, gather_closes=False)  # what compiled_step traces: no host sync
    explained = torch._dynamo.explain(lambda s, a: pure.step(dense, s, a))(env.state, action)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)

    torch._dynamo.reset()
    counters.clear()
    compiled = pure.compiled_step(env.spec)
    state, gen = env.state, torch.Generator().manual_seed(0)
    for _ in range(25):  # through episode ends and restarts
        action = random_valid(state.mask, gen)
        fast, slow = compiled(state, action), pure.step(env.spec, state, action)
        for name in ("cash", "equity", "mark", "margin", "greeks", "costs_paid", "contracts"):
            torch.testing.assert_close(getattr(fast.state, name), getattr(slow.state, name), rtol=1e-9, atol=1e-6)
        for name in ("sym", "t", "t_start", "t_end", "active", "short", "mask", "draws"):
            assert torch.equal(getattr(fast.state, name), getattr(slow.state, name)), name
        torch.testing.assert_close(fast.reward, slow.reward, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(fast.portfolio, slow.portfolio, rtol=1e-5, atol=1e-6)
        state = slow.state
    assert counters["stats"]["unique_graphs"] == 1, "compiled once for the whole rollout"
    assert not counters["recompiles"], dict(counters["recompiles"])


def test_an_env_compiled_by_its_setting_steps_as_the_eager_one(synthetic_data):
    """``launch.compile_loop: on`` through the shell: the trainer's env (no records) matches an eager twin, and the
    shell's host side (observations, episode sums) reads the compiled state."""
    cfg = EnvConfig(dtype="float64", episode_length=6)  # the previous test's env: one compile on a cold machine
    eager = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), cfg, 16, seed=3, records=False)
    compiled = BatchedOptionsEnv(synthetic_data, "train", MarketConfig(), cfg, 16, seed=3, records=False, compile="on")
    assert compiled.compiled and not eager.compiled
    obs_e, obs_c = eager.reset(), compiled.reset()
    hold = torch.zeros(16, dtype=torch.long)
    for _ in range(14):
        obs_e, obs_c = eager.step(hold).obs, compiled.step(hold).obs
        assert torch.equal(obs_e.row, obs_c.row) and torch.equal(obs_e.mask, obs_c.mask)
        torch.testing.assert_close(obs_e.portfolio, obs_c.portfolio)
    np.testing.assert_allclose(eager.take_episode_sums(), compiled.take_episode_sums(), rtol=1e-9)


def test_weighted_underlyings_are_drawn_in_proportion_and_never_at_weight_zero():
    """``symbol_weights`` (what training augmentation uses to run a share of episodes on generated paths): each
    underlying starts episodes in proportion to its weight, one of weight 0 never."""
    data = build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=800, n_underlyings=3,
                                                                                          seed=1)))
    cfg = EnvConfig(dtype="float64", episode_length=5, stagger_starts=False)
    env = BatchedOptionsEnv(data, "train", MarketConfig(), cfg, 2000, seed=3, symbol_weights=[0.7, 0.0, 0.3],
                            records=False)
    env.reset()
    counts = torch.bincount(env.sym, minlength=3).numpy()
    assert counts[1] == 0
    assert scipy_stats.binomtest(int(counts[0]), 2000, 0.7).pvalue > 1e-3
    with pytest.raises(ValueError, match="symbol_weights must be 3 non-negative numbers"):
        BatchedOptionsEnv(data, "train", MarketConfig(), cfg, 4, symbol_weights=[1.0, -1.0, 0.5])


def test_option_pnl_is_what_the_options_made_every_cost_in(synthetic_data):
    """With no rate, no shares and no dividends, cash moves only through option trades, so at every bar a copy's
    equity less its initial cash is its closed options' P&L (option_pnl) plus its open ones' unrealised P&L."""
    market = MarketConfig(risk_free_rate=0.0, stock_targets=[])
    cfg = EnvConfig(dtype="float64", episode_length=40)
    env = BatchedOptionsEnv(synthetic_data, "train", market, cfg, 64, seed=8)
    obs, gen, closed = env.reset(), torch.Generator().manual_seed(2), 0.0
    for _ in range(150):
        obs = env.step(random_valid(obs.mask, gen)).obs
        unrealised = (env.mark - env.entry_cost).sum(0)
        torch.testing.assert_close(env.equity - cfg.initial_cash, env.stats["option_pnl"] + unrealised,
                                   rtol=0, atol=1e-6)
        closed += float(env.stats["closed"].sum())
    assert closed > 1000, "many options closed and settled along the way"
