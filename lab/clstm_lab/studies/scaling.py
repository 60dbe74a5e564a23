"""Projected multi-GPU speed from one GPU's measured update and the links' bandwidths
(scripts/studies/project_scaling.py has the method and its sources; docs/BENCHMARKS.md the figures)."""
from __future__ import annotations

from clstm_ppo.agent import ActorCritic
from clstm_ppo.config import load_config
from clstm_ppo.env import PORTFOLIO_FEATURES, ActionSpace
from clstm_ppo.market.observed import observed_feature_names

LINKS_GB_PER_S = {"nvlink4": 450.0, "pcie5": 64.0}  # one way, peak: NVIDIA H100 datasheet; PCI-SIG PCIe 5.0 x16
LATENCY_S = {"nvlink4": 30e-6, "pcie5": 60e-6}  # a small all-reduce's fixed cost, an assumption (--latency-us)
SMALL_ALL_REDUCES = 3  # an update's others: the advantages' moments, the episode sums, the stop agreement


def gradient_bytes(config: str, overrides: list[str]) -> tuple[int, int]:
    """(parameters, bytes of one float32 gradient all-reduce) of the agent a config trains."""
    cfg = load_config(config, overrides)
    model = ActorCritic(len(observed_feature_names(cfg.data.option_features)), len(PORTFOLIO_FEATURES),
                        ActionSpace.from_config(cfg.market).n, cfg.agent)
    params = sum(p.numel() for p in model.parameters())
    return params, 4 * params


def all_reduce_s(nbytes: float, gpus: int, gb_per_s: float, latency_s: float) -> float:
    """A ring all-reduce of ``nbytes`` over ``gpus``: 2 (n - 1) / n of the bytes each way, plus a fixed latency."""
    if gpus == 1:
        return 0.0
    return 2.0 * (gpus - 1) / gpus * nbytes / (gb_per_s * 1e9) + latency_s


def project(gpus: int, update_s: float, rollout_s: float, steps_per_update: int, optimizer_steps: int,
            grad_bytes: int, eval_share_s: float, checkpoint_s: float, state_bytes: float, gb_per_s: float,
            latency_s: float) -> dict[str, float]:
    """One row: an update's time on ``gpus`` GPUs, its env steps per second, and the efficiency against one GPU."""
    one = rollout_s + update_s + eval_share_s + checkpoint_s
    reduce = optimizer_steps * all_reduce_s(grad_bytes, gpus, gb_per_s, latency_s) + \
        SMALL_ALL_REDUCES * all_reduce_s(0, gpus, gb_per_s, latency_s)
    gather = (gpus - 1) * state_bytes / (gb_per_s * 1e9) if gpus > 1 else 0.0
    many = one + reduce + gather
    return {"gpus": gpus, "update_s": many, "all_reduce_s": reduce, "gather_s": gather,
            "env_steps_per_s": gpus * steps_per_update / many, "efficiency": one / many}
