"""Hashes of env trajectories: every state tensor, reward, observation and episode record of every step.

``tests/data/env_trajectories.json`` holds the digests of the env as it was before the step became a pure
function (commit 5089d13, its reset draws switched to ``env/draws.py``'s counter hash, the one change the
functional step needed), computed with this module; ``test_functional_step.py`` recomputes them with today's env.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from clstm_ppo.config import CostConfig, DataConfig, EnvConfig, MarketConfig, SyntheticConfig

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


def run(case: Case, make_env, data, steps: int = 1000) -> str:
    """The digest of ``steps`` steps of ``case`` on ``make_env(data, split, market, env_cfg, n, seed, autoreset)``."""
    market, env_cfg = settings(case)
    n = len(data.symbols) if case.walk else case.num_envs
    env = make_env(data, case.split, market, env_cfg, n, case.seed, not case.walk)
    obs = env.reset(starts=torch.full((n,), env.first_bar)) if case.walk else env.reset()
    gen = torch.Generator().manual_seed(case.seed)
    weight = torch.ones(env.actions.n, dtype=torch.float64)
    weight[0] = 4.0  # hold often, as a policy does, so positions live to expiry
    h = hashlib.sha256()
    for _ in range(steps):
        if case.actions == "wild":
            action = torch.randint(0, env.actions.n, (n,), generator=gen)
        else:
            action = torch.multinomial(obs.mask.double() * weight, 1, generator=gen).squeeze(-1)
        result = env.step(action)
        step_digest(h, env, result)
        obs = result.obs
    return h.hexdigest()
