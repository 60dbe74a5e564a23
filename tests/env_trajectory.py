"""Long env trajectories of several market settings, stepped on actions drawn from a seeded generator, and their
digests: every state tensor, reward, observation and episode record of every step.

``test_functional_step.py`` steps the eager env and the sync-free step side by side on these cases, resumes one
halfway from its saved state, and runs a case twice; a digest is compared only with one computed on the same
machine in the same run (float bits differ between CPUs: ATen picks its vector kernels by instruction set).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from clstm_ppo.config import CostConfig, DataConfig, EnvConfig, MarketConfig, SyntheticConfig
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.env import step as pure

# The statistics and record fields the golden digests were made with; added later ones are checked elsewhere.
STATS = ("closed", "invalid", "margin_calls", "rejected", "reward", "traded", "wins")
RECORDS = ("closed", "costs", "env", "equity_curve", "full", "invalid", "margin_calls", "open", "rejected", "return",
           "return_pct", "reward", "shares", "start", "steps", "symbol", "traded", "wins")
STATE = ("sym", "t", "t_start", "t_end", "cash", "equity", "peak", "active", "is_call", "short", "shares", "margin",
         "strike", "expiry_bar", "expiry_time", "contracts", "entry_cost", "mark", "greeks", "costs_paid")


@dataclass(frozen=True)
class Case:
    name: str
    source: str  # sp500 or synthetic
    split: str
    seed: int
    actions: str  # "valid": drawn from the mask, trades favoured; "wild": any action, often invalid
    allow_short: bool = True
    stock_targets: tuple[float, ...] = (0.0, 0.5, 1.0)
    num_envs: int = 48
    walk: bool = False  # one copy per underlying from the first bar, no auto-reset, no ruin (the backtest's walk)
    episode_length: int = 63


CASES = (
    Case("sp500-valid-0", "sp500", "train", 0, "valid"),
    Case("sp500-valid-1", "sp500", "train", 1, "valid", stock_targets=()),
    Case("sp500-wild-2", "sp500", "train", 2, "wild"),
    Case("sp500-longonly-3", "sp500", "validation", 3, "valid", allow_short=False),
    Case("synthetic-valid-4", "synthetic", "train", 4, "valid", num_envs=32, episode_length=200),
    Case("sp500-walk-5", "sp500", "train", 5, "valid", walk=True, num_envs=1, episode_length=0),
)


def data_config(case: Case) -> DataConfig:
    if case.source == "synthetic":
        return DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=1500, seed=5))
    return DataConfig()


def settings(case: Case) -> tuple[MarketConfig, EnvConfig]:
    # The digests were made on the market of the time: one skew on both sides (iv_call_skew = iv_skew = 1.1) and
    # quotes off any tick grid.
    costs = CostConfig(index_ticks=[0.0, 0.0], stock_ticks=[0.0, 0.0])
    market = MarketConfig(allow_short=case.allow_short, stock_targets=list(case.stock_targets), iv_call_skew=1.1,
                          costs=costs)
    env = EnvConfig(dtype="float64", episode_length=case.episode_length, ruin_fraction=0.0 if case.walk else 0.5)
    return market, env


def _update(h: "hashlib._Hash", x) -> None:
    a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    if a.dtype.kind == "f":
        a = a + 0.0  # -0.0 and 0.0 are the same number
    h.update(str(a.dtype).encode() + str(a.shape).encode() + np.ascontiguousarray(a).tobytes())


def step_digest(h: "hashlib._Hash", env, result) -> None:
    """Add one step's state, outputs and episode records to ``h``."""
    for name in STATE:
        _update(h, getattr(env, name))
    for name in STATS:
        _update(h, env.stats[name])
    obs = result.obs
    for x in (result.reward, result.terminated, result.truncated, obs.portfolio, obs.mask, obs.row, obs.start):
        _update(h, x)
    if result.episodes is not None:
        for key in RECORDS:
            value = result.episodes[key]
            _update(h, np.concatenate(list(value)) if key == "equity_curve" else value)


def random_valid(mask: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One valid action per copy, uniform over its mask."""
    return torch.multinomial(mask.double(), 1, generator=gen).squeeze(-1)


def make(data, split, market, cfg, n, seed, autoreset) -> BatchedOptionsEnv:
    """The env as the CPU runs it: eager, closes priced on the closing copies alone."""
    return BatchedOptionsEnv(data, split, market, cfg, n, seed=seed, autoreset=autoreset)


def make_sync_free(data, split, market, cfg, n, seed, autoreset) -> BatchedOptionsEnv:
    """The env with the step as compiled code runs it (every copy priced at a close, no host sync), run eagerly."""
    env = make(data, split, market, cfg, n, seed, autoreset)
    env.spec = dataclasses.replace(env.spec, gather_closes=False)
    env._step = functools.partial(pure.step, env.spec, autoreset=autoreset, keep_ended=True)
    return env


def draw_action(case: Case, mask: torch.Tensor, n_actions: int, gen: torch.Generator) -> torch.Tensor:
    """The case's next actions: any action ("wild", often invalid) or drawn from the mask, holding four times as
    often as any other valid action, as a policy does, so positions live to expiry."""
    if case.actions == "wild":
        return torch.randint(0, n_actions, (mask.shape[0],), generator=gen)
    weight = torch.ones(n_actions, dtype=torch.float64)
    weight[0] = 4.0
    return torch.multinomial(mask.double() * weight, 1, generator=gen).squeeze(-1)


def start(case: Case, make_env, data, seed: int | None = None):
    """(env, its first observation) of ``case`` on ``make_env(data, split, market, env_cfg, n, seed, autoreset)``."""
    market, env_cfg = settings(case)
    n = len(data.symbols) if case.walk else case.num_envs
    env = make_env(data, case.split, market, env_cfg, n, case.seed if seed is None else seed, not case.walk)
    return env, (env.reset(starts=torch.full((n,), env.first_bar)) if case.walk else env.reset())


def run(case: Case, make_env, data, steps: int = 1000) -> str:
    """The digest of ``steps`` steps of ``case`` on ``make_env``."""
    env, obs = start(case, make_env, data)
    gen, h = torch.Generator().manual_seed(case.seed), hashlib.sha256()
    for _ in range(steps):
        result = env.step(draw_action(case, obs.mask, env.actions.n, gen))
        step_digest(h, env, result)
        obs = result.obs
    return h.hexdigest()
