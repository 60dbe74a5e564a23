"""What an ended episode reports, two ways.

On the device, with no host sync: ``add_finished`` adds every ended full-length episode's figures to
the copies' running sums (``EnvState.finished``), which the trainer reads once per update
(``take_finished``). On the host, for the tools that walk a few copies and want each episode whole
(the backtest walk, gymnasium, the strategy studies): ``episode_records`` reads the ended copies'
statistics and equity curves.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from clstm_ppo.env.state import EnvSpec, EnvState


def full_length(spec: EnvSpec, s: EnvState) -> Tensor:
    """(N,) bool: the copy's episode runs its full length. False for a first episode cut short by
    staggering (``step.stagger``): a real episode, but its return covers fewer bars, so the training
    metrics leave it out."""
    return s.t_end == spec.episode_end(s.t_start)


def add_finished(spec: EnvSpec, s: EnvState, ended: Tensor) -> None:
    """Add the ``ended`` copies' full-length episodes to ``s.finished`` (rows:
    ``state.EPISODE_SUMS``; the same sums ``metrics.episode_sums`` takes of host records)."""
    initial = spec.cfg.initial_cash
    profit = s.equity - initial
    rows = torch.stack(
        [
            torch.ones_like(s.equity),
            s.stats["reward"],
            profit,
            (s.equity / initial - 1.0) * 100.0,
            s.stats["closed"],
            s.stats["wins"],
            s.active.sum(0).to(spec.dtype),
            (s.t - s.t_start).to(spec.dtype),
            (profit > 0).to(spec.dtype),
            *s.costs_paid,
        ]
    ).to(torch.float64)
    counted = (ended & full_length(spec, s)).to(torch.float64)
    s.finished = s.finished + rows * counted


def take_finished(s: EnvState) -> tuple[np.ndarray, EnvState]:
    """The sums over every copy of the episodes finished since the last take (one host copy), and
    the state with them cleared."""
    sums = s.finished.sum(1).cpu().numpy()
    rest = s.working_copy()
    rest.finished = torch.zeros_like(s.finished)
    return sums, rest


def episode_records(
    spec: EnvSpec, s: EnvState, idx: Tensor, curves: Tensor
) -> dict[str, np.ndarray]:
    """The statistics of the copies ``idx`` whose episodes end now, on the host; ``curves`` (N,
    max_len + 1) are the copies' equity at each bar of the episode."""
    steps = (s.t - s.t_start)[idx]
    initial = spec.cfg.initial_cash
    out = {
        "env": idx,
        "symbol": s.sym[idx],
        "start": s.t_start[idx],
        "steps": steps,
        "reward": s.stats["reward"][idx],
        "return": s.equity[idx] - initial,
        "return_pct": (s.equity[idx] / initial - 1.0) * 100.0,
        "closed": s.stats["closed"][idx],
        "wins": s.stats["wins"][idx],
        "open": s.active[:, idx].sum(0),
        "invalid": s.stats["invalid"][idx],
        "rejected": s.stats["rejected"][idx],
        "traded": s.stats["traded"][idx],
        "margin_calls": s.stats["margin_calls"][idx],
        "shares": s.shares[idx],
        "option_pnl": s.stats["option_pnl"][idx],
        "costs": s.costs_paid[:, idx].T,
        "full": full_length(spec, s)[idx],  # the training metrics count full-length episodes only
    }
    out = to_host({**out, "curves": curves[idx]}, packed=spec.device.type != "cpu")
    ended_curves = out.pop("curves")
    out["equity_curve"] = ragged([ended_curves[i, : n + 1] for i, n in enumerate(out["steps"])])
    return out


def to_host(tensors: dict[str, Tensor], packed: bool) -> dict[str, np.ndarray]:
    """The tensors as numpy arrays of their own dtypes and shapes.

    ``packed``: in one device-to-host copy (a GPU waits once, not once per tensor). Every value goes
    through float64, exact for bools, floats and integers below 2**53 (indices and counts here). On
    a CPU each tensor is already host memory.
    """
    if not packed:
        return {k: v.cpu().numpy() for k, v in tensors.items()}
    flat = torch.cat([v.reshape(-1).to(torch.float64) for v in tensors.values()]).cpu().numpy()
    out, at = {}, 0
    for k, v in tensors.items():
        n = v.numel()
        out[k] = (
            flat[at : at + n]
            .reshape(tuple(v.shape))
            .astype(torch.empty(0, dtype=v.dtype).numpy().dtype)
        )
        at += n
    return out


def ragged(arrays: list[np.ndarray]) -> np.ndarray:
    """A 1-D object array of arrays (np.array would make a 2-D array when the lengths agree)."""
    out = np.empty(len(arrays), dtype=object)
    for i, a in enumerate(arrays):
        out[i] = a
    return out
