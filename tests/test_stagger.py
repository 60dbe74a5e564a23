"""Staggered first episodes (env.stagger_starts): after a random reset the copies are spread over the episode's
phase, later episodes run full length, seeds and checkpoints still fix everything, and every other use of the
env (explicit starts, no autoreset, one copy) keeps exact lengths and the same random stream as before."""
import dataclasses

import numpy as np
import pytest
import torch

from clstm_ppo.config import DataConfig, EnvConfig, MarketConfig, SyntheticConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.market import COST_KINDS
from clstm_ppo.metrics import episode_sums

ON = EnvConfig(dtype="float64")
OFF = dataclasses.replace(ON, stagger_starts=False)


@pytest.fixture(scope="module")
def data():
    return build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=1500, seed=5)))


def make(data, cfg: EnvConfig, n: int, seed: int = 0, autoreset: bool = True) -> BatchedOptionsEnv:
    return BatchedOptionsEnv(data, "train", MarketConfig(), cfg, num_envs=n, seed=seed, autoreset=autoreset)


def remaining(env: BatchedOptionsEnv) -> np.ndarray:
    return (env.t_end - env.t).numpy()


def test_staggered_copies_are_spread_evenly_over_the_episode_and_unstaggered_ones_are_not(data):
    length, n = ON.episode_length, 2000
    env = make(data, ON, n)
    obs = env.reset()
    left = remaining(env)
    assert obs.start.all() and torch.equal(env.t, env.t_start)  # each copy is at its first bar
    assert left.min() >= 1 and left.max() <= length
    assert len(np.unique(left)) > 0.9 * length  # nearly every phase taken
    # Uniform over 1..252: each quarter holds n / 4 = 500 copies, give or take 4 standard deviations (~78).
    quarters = np.histogram(left, bins=4, range=(0.5, length + 0.5))[0]
    assert (np.abs(quarters - n / 4) < 80).all(), quarters
    assert abs(left.mean() - (length + 1) / 2) < 6

    plain = make(data, OFF, n)
    plain.reset()
    assert (remaining(plain) == length).all()
    assert torch.equal(plain.t_start, env.t_start) and torch.equal(plain.sym, env.sym)  # the same starts, drawn first


def test_the_same_seed_gives_the_same_phases_and_another_seed_others(data):
    ends = [make(data, ON, 64, seed) for seed in (7, 7, 8)]
    for env in ends:
        env.reset()
    assert torch.equal(ends[0].t_end, ends[1].t_end) and torch.equal(ends[0].t_start, ends[1].t_start)
    assert not torch.equal(ends[0].t_end - ends[0].t_start, ends[2].t_end - ends[2].t_start)


def test_a_cut_first_episode_is_reported_as_not_full_and_the_next_runs_full_length(data):
    cfg = dataclasses.replace(ON, episode_length=20)
    n = 64
    env = make(data, cfg, n, seed=2)
    env.reset()
    first_len = (env.t_end - env.t_start).clone()
    assert len(first_len.unique()) > 10
    hold = torch.full((n,), env.actions.hold)
    ends: dict[int, list[tuple[int, int, bool]]] = {i: [] for i in range(n)}  # copy -> (step, steps, full)
    for step in range(1, 2 * cfg.episode_length + 1):
        result = env.step(hold)
        if result.episodes is not None:
            ep = result.episodes
            assert ep["full"].dtype == bool
            for k, i in enumerate(ep["env"]):
                ends[int(i)].append((step, int(ep["steps"][k]), bool(ep["full"][k])))
            fresh = torch.as_tensor(ep["env"])
            assert (env.t_end[fresh] - env.t_start[fresh] == cfg.episode_length).all()  # autoreset: full length
    for i in range(n):
        k = int(first_len[i])
        assert ends[i][0] == (k, k, k == cfg.episode_length), i  # cut episodes end on their own step
        assert ends[i][1] == (k + cfg.episode_length, cfg.episode_length, True), i


def test_explicit_starts_no_autoreset_and_a_single_copy_keep_full_lengths_and_the_random_stream(data):
    n = 16
    starts = torch.arange(n) * 10 + data.window + 5
    for env in (make(data, ON, n), make(data, OFF, n)):
        env.reset(starts)
        assert (env.t_end - starts == ON.episode_length).all()
    for stagger_on, stagger_off in ((make(data, ON, n, autoreset=False), make(data, OFF, n, autoreset=False)),
                                    (make(data, ON, 1), make(data, OFF, 1))):
        stagger_on.reset(), stagger_off.reset()
        assert not stagger_on.staggered
        assert torch.equal(stagger_on.t_end, stagger_off.t_end)
        assert (stagger_on.t_end - stagger_on.t_start == ON.episode_length).all()
        assert torch.equal(stagger_on.draws, stagger_off.draws)  # the same draws made: the same stream ahead


def test_a_restored_env_continues_exactly_as_the_original(data):
    cfg = dataclasses.replace(ON, episode_length=15)
    original, restored = make(data, cfg, 32, seed=4), make(data, cfg, 32, seed=99)
    original.reset()
    hold = torch.full((32,), original.actions.hold)
    for _ in range(5):
        original.step(hold)
    restored.load_state_dict(original.state_dict())
    for _ in range(40):  # through the cut episodes' ends and the full ones' autoresets
        a, b = original.step(hold), restored.step(hold)
        assert (a.episodes is None) == (b.episodes is None)
        for name in ("t", "t_start", "t_end", "sym", "equity"):
            assert torch.equal(getattr(original, name), getattr(restored, name)), name


def test_training_sums_leave_out_the_cut_first_episodes():
    def records(full: list[bool]) -> dict[str, np.ndarray]:
        n = len(full)
        values = np.arange(1.0, n + 1.0)
        return {"reward": values, "return": values, "return_pct": values, "closed": values, "wins": values,
                "open": values, "steps": values, "costs": np.ones((n, len(COST_KINDS))), "full": np.array(full)}

    mixed = records([True, False, True])
    kept = {k: v[[0, 2]] for k, v in mixed.items()}
    np.testing.assert_array_equal(episode_sums(mixed), episode_sums(kept))
    assert episode_sums(mixed)[0] == 2.0
    assert not episode_sums(records([False, False])).any()
