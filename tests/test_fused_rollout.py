"""The rollout as one compiled decision per step (``agent/fused_rollout.py``): LSTM 2 as a cell is
one step of the ``nn.LSTM``; the draws follow the policy's law and never pick a masked action; the fused decision
fills the storage as the eager rollout does; compiled, it is one graph that a rollout, an update and a second
rollout never recompile; a training run on it resumes exactly."""
import copy
import dataclasses
import functools

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats
from torch.utils._pytree import tree_leaves, tree_map_only

from clstm_ppo.agent import ActorCritic, RolloutStorage, rollout
from clstm_ppo.agent.fused_rollout import FusedRollout
from clstm_ppo.agent.precision import Precision
from clstm_ppo.config import AgentConfig, DataConfig, EnvConfig, MarketConfig, PPOConfig, SyntheticConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv
from clstm_ppo.env import step as pure

CPU = torch.device("cpu")
NUM_ENVS, NUM_STEPS = 16, 12


@pytest.fixture(scope="module")
def synthetic():
    return build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=600, seed=5)))


def sync_free_env(data) -> BatchedOptionsEnv:
    """The trainer's env as compiled code sees it (every copy priced at a close), stepped eagerly."""
    cfg = EnvConfig(dtype="float64", episode_length=6)  # float64: compiled and eager agree to 1e-9, not 1e-5
    env = BatchedOptionsEnv(data, "train", MarketConfig(), cfg, NUM_ENVS, seed=3, records=False)
    env.spec = dataclasses.replace(env.spec, gather_closes=False)
    env._step = functools.partial(pure.step, env.spec, autoreset=True, keep_ended=False)
    return env


def make_model(data, kind: str) -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(len(data.feature_names), len(PORTFOLIO_FEATURES), sync_free_env(data).actions.n,
                       AgentConfig(kind=kind, lstm1_hidden=8, mlp_hidden=8, lstm2_hidden=12))


class ReplayedStep:
    """An env step as a CUDA graph replays it (inductor's "reduce-overhead" mode, on a GPU only): each call writes its
    outputs into the same buffers and returns those, so what a caller kept from the last call changes under it."""

    def __init__(self, step):
        self.step, self.outputs = step, None

    def __call__(self, state, action):
        out = self.step(state, action)
        if self.outputs is None:
            self.outputs = tree_map_only(torch.Tensor, torch.Tensor.clone, out)
        else:
            for buffer, value in zip(tree_leaves(self.outputs), tree_leaves(out), strict=True):
                if buffer is not None:
                    buffer.copy_(value)
        return self.outputs


def rollouts(model, data, fused: bool, compiled: bool = False, n: int = 3, update_after: int | None = None,
             replayed: bool = False):
    """``n`` rollouts from one seed, eager (``rollout.collect``) or fused; the storage of each. ``update_after``:
    the weights change in place (as an optimizer step changes them) after that rollout. ``replayed``: the env's
    step overwrites its last outputs, as with ``launch.cuda_graphs`` on a GPU."""
    env, precision = sync_free_env(data), Precision(CPU, "fp32")
    if replayed:
        env.cuda_graphs, env._step = True, ReplayedStep(env._step)
    storage = RolloutStorage(NUM_STEPS, NUM_ENVS, len(PORTFOLIO_FEATURES), env.actions.n, CPU)
    ppo = PPOConfig(num_steps=NUM_STEPS)
    codes = rollout.bar_codes(model, env.market_windows, 10**9, precision)
    obs, state = env.reset(), model.initial_state(NUM_ENVS, CPU)
    runner = FusedRollout(model, env, storage, precision, cuda_graphs=False, compile=compiled) if fused else None
    torch.manual_seed(7)
    stored = []
    for _ in range(n):
        if fused:
            obs, state = runner.collect(obs, state, codes, ppo.gamma, ppo.gae_lambda)
        else:
            obs, state = rollout.collect(model, env, storage, obs, state, precision, ppo, codes)
        stored.append({k: v.clone() for k, v in vars(storage).items() if isinstance(v, torch.Tensor)})
        if len(stored) - 1 == update_after:
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1.01)
    return stored, env


def assert_same_rollouts(fast, slow, rtol=1e-5, atol=1e-5):
    for one, other in zip(fast, slow, strict=True):
        for name in ("rows", "mask", "starts", "actions", "dones"):
            assert torch.equal(one[name], other[name]), name
        for name in ("portfolio", "logprobs", "values", "rewards", "advantages", "returns"):
            torch.testing.assert_close(one[name], other[name], rtol=rtol, atol=atol, msg=name)


@pytest.mark.parametrize("kind", ["clstm", "lstm", "mlp"])
def test_one_decision_is_one_step_of_the_sequence_forward(synthetic, kind):
    """``decide_one`` (LSTM 2 as a cell on the ``nn.LSTM``'s weights) gives ``decide``'s logits, values and state
    for a one-step sequence, with episode starts zeroing the state."""
    model = make_model(synthetic, kind)
    env = sync_free_env(synthetic)
    obs = env.reset()
    gen = torch.Generator().manual_seed(1)
    state = tuple(torch.randn(1, NUM_ENVS, model.hidden_size, generator=gen) for _ in range(2))
    code = model.encoder(obs.market)
    start = torch.arange(NUM_ENVS) % 3 == 0
    with torch.no_grad():
        one = model.decide_one(code, obs.portfolio, obs.mask, start, state)
        seq = model.decide(code[None], obs.portfolio[None], obs.mask[None], start[None], state)
    torch.testing.assert_close(one[0], seq[0][0])
    torch.testing.assert_close(one[1], seq[1][0])
    for mine, theirs in zip(one[2], seq[2], strict=True):
        torch.testing.assert_close(mine, theirs)


def test_draws_follow_the_policy_and_never_pick_a_masked_action():
    """``sample_actions`` inverts the categorical CDF: the same actions as numpy's searchsorted on the CDF (a second
    implementation), frequencies as the softmax says (chi-square), and no masked action even at u = 0 or u -> 1."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 6, generator=gen)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 0, 1, 0, 1, 0], [0, 0, 0, 0, 0, 1], [1, 0, 0, 0, 0, 0]], dtype=bool)
    logits = logits.masked_fill(~mask, -1e9)
    u = torch.rand(20_000, 4, generator=gen)
    u[0], u[1] = 0.0, torch.nextafter(torch.tensor(1.0), torch.tensor(0.0))
    actions = torch.stack([rollout.sample_actions(logits, row) for row in u])  # (draws, 4)
    assert mask.gather(1, actions.T).all(), "a masked action was drawn"
    cdf = torch.softmax(logits, -1).cumsum(-1).numpy()
    for i in range(4):  # the first action whose CDF exceeds the target, the target just below the total at most
        target = np.minimum(u[:, i].numpy() * cdf[i, -1], np.nextafter(cdf[i, -1], np.float32(0)))
        np.testing.assert_array_equal(actions[:, i].numpy(), np.searchsorted(cdf[i], target, side="right"))
    probs = torch.softmax(logits, -1)
    for i in range(2):  # the rows with more than one valid action
        valid = mask[i].nonzero().squeeze(-1)
        counts = torch.bincount(actions[:, i], minlength=6)[valid].numpy().astype(np.float64)
        expected = probs[i, valid].double().numpy()
        assert scipy_stats.chisquare(counts, expected / expected.sum() * counts.sum()).pvalue > 1e-4


@pytest.mark.parametrize("kind", ["clstm", "lstm", "mlp"])
def test_the_fused_decision_fills_the_storage_as_the_eager_rollout_does(synthetic, kind):
    """Three rollouts through episode ends: the same actions, rows, masks, starts and ends, and the same rewards,
    log-probabilities, values and advantages to float tolerance (the cell and the ``nn.LSTM`` sum in other orders)."""
    model = make_model(synthetic, kind)
    fused, env_fused = rollouts(model, synthetic, fused=True)
    eager, env_eager = rollouts(model, synthetic, fused=False)
    assert_same_rollouts(fused, eager)
    assert any(r["dones"].any() for r in eager), "the rollouts must cross episode ends"
    np.testing.assert_allclose(env_fused.take_episode_sums(), env_eager.take_episode_sums(), rtol=1e-5)


def test_an_env_step_replayed_as_a_cuda_graph_leaves_its_callers_their_observations(synthetic):
    """With ``launch.cuda_graphs`` the env step is replayed as a CUDA graph, which writes each step's outputs over the
    last one's; the eager rollout (a split with more bars than a rollout has decisions, e.g. the smoke config on a GPU)
    stores each observation after the next step. It must store what it saw: the same storage as a plain step."""
    model = make_model(synthetic, "clstm")
    replayed, env = rollouts(model, synthetic, fused=False, replayed=True)
    plain, _ = rollouts(model, synthetic, fused=False)
    assert env._step(env.state, torch.zeros(NUM_ENVS, dtype=torch.long)).row \
        is env._step(env.state, torch.zeros(NUM_ENVS, dtype=torch.long)).row  # the hazard is real here
    assert_same_rollouts(replayed, plain, rtol=0, atol=0)
    assert any(r["dones"].any() for r in plain), "the rollouts must cross episode ends"


def test_the_compiled_decision_is_one_graph_that_rollouts_and_updates_do_not_recompile(synthetic):
    """fullgraph (a break raises), one graph over three rollouts with the weights changed in place between them (as
    an optimizer step does), no recompile, and the storage of the eager rollout; a second runner (another run in
    the same process) reuses the graph."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = make_model(synthetic, "clstm")
    twin = copy.deepcopy(model)
    compiled, _ = rollouts(model, synthetic, fused=True, compiled=True, n=3, update_after=1)
    eager, _ = rollouts(twin, synthetic, fused=False, n=3, update_after=1)
    assert_same_rollouts(compiled, eager)
    rollouts(make_model(synthetic, "clstm"), synthetic, fused=True, compiled=True, n=1)
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["recompiles"], dict(counters["recompiles"])
    assert not counters["graph_break"], dict(counters["graph_break"])
