"""The env step as a pure function (SPEC section 13): the same trajectories as the env before it, bit for bit;
no changed input; one compiled graph with no break or recompile; device-side episode sums equal to the host's
records; random draws that are uniform, per copy and resumable."""
import dataclasses
import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from env_trajectory import CASES, data_config, run
from scipy import stats as scipy_stats

from clstm_ppo.config import DataConfig, EnvConfig, MarketConfig, SyntheticConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.env import step as pure
from clstm_ppo.env.draws import integers, mix32
from clstm_ppo.env.state import STATE_FIELDS
from clstm_ppo.metrics import concat_episodes, episode_sums

GOLDEN = json.loads((Path(__file__).parent / "data" / "env_trajectories.json").read_text())


@pytest.fixture(scope="module")
def datasets():
    return {source: build_market_data(data_config(next(c for c in CASES if c.source == source)))
            for source in {c.source for c in CASES}}


@pytest.fixture(scope="module")
def synthetic():
    return build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=1500, seed=5)))


def make(data, split, market, cfg, n, seed, autoreset):
    return BatchedOptionsEnv(data, split, market, cfg, n, seed=seed, autoreset=autoreset)


def make_sync_free(data, split, market, cfg, n, seed, autoreset):
    """The env with the step as compiled code runs it (every copy priced at a close), run eagerly."""
    env = make(data, split, market, cfg, n, seed, autoreset)
    env.spec = dataclasses.replace(env.spec, gather_closes=False)
    env._step = functools.partial(pure.step, env.spec, autoreset=autoreset, keep_ended=True)
    return env


@pytest.mark.parametrize("sync_free", [False, True], ids=["eager-cpu", "sync-free"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_functional_step_reproduces_the_env_before_it_bit_for_bit(datasets, case, sync_free):
    """1,000 steps in float64: every state tensor, reward, observation and episode record of every step hashes as
    the env before the refactor did (tests/data/env_trajectories.json says how those digests were made), on the
    CPU's eager path and on the sync-free path compiled code and GPUs take."""
    digests = GOLDEN["digests_sync_free" if sync_free else "digests"]
    assert run(case, make_sync_free if sync_free else make, datasets[case.source], steps=GOLDEN["steps"]) \
        == digests[case.name]


def flat(state) -> dict[str, torch.Tensor]:
    d = state.to_dict()
    return {**{k: v for k, v in d.items() if k != "stats"}, **{f"stats.{k}": v for k, v in d["stats"].items()}}


def test_the_step_changes_no_input_and_the_same_input_gives_the_same_output(synthetic):
    env = BatchedOptionsEnv(synthetic, "train", MarketConfig(), EnvConfig(dtype="float64", episode_length=10), 64,
                            seed=2, records=False)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    state = env.state
    for _ in range(40):  # through episode ends and restarts
        before = {k: v.clone() for k, v in flat(state).items()}
        action = torch.multinomial(state.mask.double(), 1, generator=gen).squeeze(-1)
        first, again = pure.step(env.spec, state, action), pure.step(env.spec, state, action)
        for k, v in flat(state).items():
            assert torch.equal(v, before[k]), f"the step changed its input's {k}"
        for k, v in flat(first.state).items():
            assert torch.equal(v, flat(again.state)[k]), k
        state = first.state
    assert set(STATE_FIELDS) == set(state.to_dict())


def test_device_episode_sums_equal_the_host_records_of_the_same_episodes(synthetic):
    """What the trainer logs (summed on the device, read once per update) equals metrics.episode_sums of the
    per-episode records the host tools read, staggered first episodes left out of both."""
    cfg = EnvConfig(dtype="float64", episode_length=12)
    env = BatchedOptionsEnv(synthetic, "train", MarketConfig(), cfg, 96, seed=5)
    obs, gen, records = env.reset(), torch.Generator().manual_seed(3), []
    for _ in range(60):
        result = env.step(torch.multinomial(obs.mask.double(), 1, generator=gen).squeeze(-1))
        obs = result.obs
        records.append(result.episodes)
    host = episode_sums(concat_episodes(records))
    assert host[0] > 100, "enough full-length episodes ended"
    np.testing.assert_allclose(env.take_episode_sums(), host, rtol=1e-12, atol=1e-6)
    assert not env.take_episode_sums().any(), "a take clears the sums"


def test_each_copy_draws_its_own_starts_whatever_the_others_do(synthetic):
    """A copy's k-th episode start depends on its key and k alone: copies that end on other steps (other
    actions) leave it unchanged, so a rank's copies do not depend on each other's luck."""
    cfg = EnvConfig(dtype="float64", episode_length=8, ruin_fraction=0.0, stagger_starts=False)
    a, b = (BatchedOptionsEnv(synthetic, "train", MarketConfig(), cfg, 16, seed=9) for _ in range(2))
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


def test_a_restored_state_continues_exactly_through_restarts(synthetic):
    cfg = EnvConfig(dtype="float64", episode_length=9)
    original = BatchedOptionsEnv(synthetic, "train", MarketConfig(), cfg, 24, seed=1, records=False)
    restored = BatchedOptionsEnv(synthetic, "train", MarketConfig(), cfg, 24, seed=77, records=False)
    obs, gen = original.reset(), torch.Generator().manual_seed(0)
    for _ in range(7):
        obs = original.step(torch.multinomial(obs.mask.double(), 1, generator=gen).squeeze(-1)).obs
    restored.load_state_dict(original.state_dict())
    for _ in range(30):
        action = torch.multinomial(obs.mask.double(), 1, generator=gen).squeeze(-1)
        obs = original.step(action).obs
        restored.step(action)
        for k, v in flat(original.state).items():
            assert torch.equal(v, flat(restored.state)[k]), k


def test_the_step_compiles_to_one_graph_and_agrees_with_eager(synthetic):
    """fullgraph: no graph break (a .item(), nonzero or boolean index would break it); dynamo's explain sees one
    graph; a rollout does not recompile; each compiled step agrees with the eager one from the same state."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    # The env of the next test, whose graph is then read from inductor's cache: a cold CI machine compiles it once.
    cfg = EnvConfig(dtype="float64", episode_length=6)
    env = BatchedOptionsEnv(synthetic, "train", MarketConfig(), cfg, 16, seed=4, records=False)
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
        action = torch.multinomial(state.mask.double(), 1, generator=gen).squeeze(-1)
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


def test_an_env_compiled_by_its_setting_steps_as_the_eager_one(synthetic):
    """``env.compile: on`` through the shell: the trainer's env (no records) matches an eager twin, and the
    shell's host side (observations, episode sums) reads the compiled state."""
    cfg = EnvConfig(dtype="float64", episode_length=6)  # the previous test's env: one compile on a cold machine
    eager = BatchedOptionsEnv(synthetic, "train", MarketConfig(), cfg, 16, seed=3, records=False)
    compiled = BatchedOptionsEnv(synthetic, "train", MarketConfig(), cfg, 16, seed=3, records=False, compile="on")
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


def test_option_pnl_is_what_the_options_made_every_cost_in(synthetic):
    """With no rate, no shares and no dividends, cash moves only through option trades, so at every bar a copy's
    equity less its initial cash is its closed options' P&L (option_pnl) plus its open ones' unrealised P&L."""
    market = MarketConfig(risk_free_rate=0.0, stock_targets=[])
    cfg = EnvConfig(dtype="float64", episode_length=40)
    env = BatchedOptionsEnv(synthetic, "train", market, cfg, 64, seed=8)
    obs, gen, closed = env.reset(), torch.Generator().manual_seed(2), 0.0
    for _ in range(150):
        obs = env.step(torch.multinomial(obs.mask.double(), 1, generator=gen).squeeze(-1)).obs
        unrealised = (env.mark - env.entry_cost).sum(0)
        torch.testing.assert_close(env.equity - cfg.initial_cash, env.stats["option_pnl"] + unrealised,
                                   rtol=0, atol=1e-6)
        closed += float(env.stats["closed"].sum())
    assert closed > 1000, "many options closed and settled along the way"
