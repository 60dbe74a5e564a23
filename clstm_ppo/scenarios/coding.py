"""What the neural generators learn: the filter's residual vectors (filtering.py), made
near-Gaussian and standardised, and the state each bar is drawn in.

- Columns with heavy tails (gap, ret, dvol and the implied vol's innovation) go through a Lambert
  W x Gaussian transform fitted on the training residuals (lambertw.py), or, where that family
  cannot make the column Gaussian (a value holding 5% of the rows, or tails past its largest
  delta), through the empirical quantile map (quantile_map.py); the square-rooted wicks only
  through standardisation. Generated values go back through the forward map, so the tails the
  transform took out come back.
- A bar is drawn given its state (``cond``): the filter's log variance, the implied vol's premium
  and the previous bar's coded residuals, all known before the bar. (The trailing window's return
  and volatility were tried as state too: a generator asked to hold a regime then learned to pull
  the window back with ever larger moves, and its volatility ran away; docs/SCENARIOS.md.)

Everything is fitted on the training split; the training rows (their coded residuals and states)
are kept so a path can start where the training split ended (``start="end"``) or at a random
training bar (``"random"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from clstm_ppo.scenarios.filtering import BarFilter, FilterState
from clstm_ppo.scenarios.lambertw import MAX_DELTA, LambertW
from clstm_ppo.scenarios.quantile_map import QuantileMap, has_atom
from clstm_ppo.scenarios.residual_scale import Calibration

HEAVY = ("gap", "ret", "dvol", "logiv")
STD_FLOOR = 1e-8
# where a generated path starts (Transform.start), and how the report says it
STARTS = {
    "end": "after the last training bar",
    "random": "before random training bars",
    "regime": "after training bars of the requested regime",
}
Marginal = LambertW | QuantileMap


def fit_marginal(x: np.ndarray) -> Marginal:
    """Lambert W where it Gaussianises the column; the empirical quantile map where it cannot: a
    point mass (a gap of exactly 0 on half the S&P 500's training days drove its delta to the
    cap, and a generator's spread of that spike came back as gaps twice the real ones' size) or
    tails past MAX_DELTA."""
    lw = LambertW.fit(x)
    return QuantileMap.fit(x) if has_atom(x) or lw.delta >= MAX_DELTA else lw


def marginal_from_state_dict(state: dict[str, Any]) -> Marginal:
    return (
        QuantileMap.from_state_dict(state)
        if state.get("kind") == "quantile"
        else LambertW.from_state_dict(state)
    )


@dataclass
class ResidualCoder:
    """Per column: Lambert W (HEAVY columns) then standardisation; ``decode`` inverts ``encode``
    exactly on values inside the training rows' coded range, and keeps a generated value to that
    range first: the forward map grows like u exp(delta u^2 / 2), so a value far outside what it was
    fitted on would be an absurd bar (a volume change of e^12), and the training extremes are the
    tails the model is meant to bring back."""

    # per column: its Gaussianising map, None for standardisation alone
    marginals: list[Marginal | None]
    mean: np.ndarray
    std: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @classmethod
    def fit(cls, resid: np.ndarray, names: tuple[str, ...]) -> "ResidualCoder":
        rows = resid.reshape(-1, resid.shape[-1])
        marginals = [fit_marginal(rows[:, i]) if n in HEAVY else None for i, n in enumerate(names)]
        wide = np.full(len(names), np.inf)
        coded = cls(marginals, np.zeros(len(names)), np.ones(len(names)), -wide, wide).encode(rows)
        mean, std = coded.mean(axis=0), np.maximum(coded.std(axis=0), STD_FLOOR)
        return cls(
            marginals, mean, std, (coded.min(axis=0) - mean) / std, (coded.max(axis=0) - mean) / std
        )

    def encode(self, resid: np.ndarray) -> np.ndarray:
        x = np.array(resid, dtype=np.float64)
        for i, m in enumerate(self.marginals):
            if m is not None:
                x[..., i] = m.gaussianise(x[..., i])
        return (x - self.mean) / self.std

    def decode(self, g: np.ndarray) -> np.ndarray:
        x = np.clip(np.asarray(g, dtype=np.float64), self.lo, self.hi) * self.std + self.mean
        for i, m in enumerate(self.marginals):
            if m is not None:
                x[..., i] = m.heavy(x[..., i])
        return x

    def state_dict(self) -> dict[str, Any]:
        return {
            "marginals": [None if m is None else m.state_dict() for m in self.marginals],
            **{k: getattr(self, k).tolist() for k in ("mean", "std", "lo", "hi")},
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "ResidualCoder":
        # "lambert": checkpoints from before the quantile map
        saved = state.get("marginals", state.get("lambert"))
        return cls(
            [None if s is None else marginal_from_state_dict(s) for s in saved],
            *(np.asarray(state[k], dtype=np.float64) for k in ("mean", "std", "lo", "hi")),
        )


@dataclass
class Transform:
    filt: BarFilter
    coder: ResidualCoder
    cond_mean: np.ndarray  # (2,) standardisation of the log variance and the premium
    cond_std: np.ndarray
    ret: np.ndarray  # (S, T) training log returns
    var: np.ndarray  # (S, T + 1) their filtered variances
    prem: np.ndarray  # (S, T) implied vol premiums (zeros without an implied vol)
    coded: np.ndarray  # (S, T, F) float32 coded residuals

    @property
    def window(self) -> int:
        return self.filt.window

    @classmethod
    def fit(cls, raw: np.ndarray, names: tuple[str, ...], window: int) -> "Transform":
        """From training-split columns (S, T, F) alone."""
        filt = BarFilter.fit(raw, names, window)
        resid, var, prem = filt.residuals(raw)
        # rows that have a full state, as the models see
        coder = ResidualCoder.fit(resid[:, window:], names)
        out = cls(
            filt,
            coder,
            np.zeros(2),
            np.ones(2),
            raw[..., names.index("ret")].astype(np.float64),
            var,
            prem,
            coder.encode(resid).astype(np.float32),
        )
        stats = out._state_columns()[:, window:].reshape(-1, 2)
        out.cond_mean, out.cond_std = stats.mean(axis=0), np.maximum(stats.std(axis=0), STD_FLOOR)
        return out

    def _state_columns(self) -> np.ndarray:
        """(S, T, 2): each training bar's log variance and the premium of the bar before it."""
        return np.stack(
            [
                np.log(self.var[:, :-1]),
                np.concatenate([self.prem[:, :1], self.prem[:, :-1]], axis=1),
            ],
            axis=-1,
        )

    def training_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Coded residuals (S, T, F) and states (S, T, C) of the training bars; rows before
        ``window`` are not whole and are never drawn."""
        prev = np.concatenate([np.zeros_like(self.coded[:, :1]), self.coded[:, :-1]], axis=1)
        cond = np.concatenate(
            [(self._state_columns() - self.cond_mean) / self.cond_std, prev], axis=-1
        )
        return self.coded, cond.astype(np.float32)

    @property
    def n_cond(self) -> int:
        return 2 + self.coded.shape[-1]

    def start(
        self,
        paths: int,
        rng: np.random.Generator,
        how: str = "end",
        labels: np.ndarray | None = None,
        regime: int | None = None,
    ) -> tuple[FilterState, np.ndarray]:
        """Each path's underlying and state, with the previous bar's coded residuals: after the
        training split's last bar (``end``), before a random training bar (``random``), or after
        a random training bar that ``labels`` (S, T), the training bars' regimes, put in
        ``regime`` (``regime``: where that regime's real bars are, for comparing a held regime's
        paths with them)."""
        if how not in STARTS:
            raise ValueError(f"start {how!r}: one of {', '.join(STARTS)}")
        n_sym, n_bars = self.ret.shape
        if how == "regime":
            if labels is None or regime is None:
                raise ValueError("start 'regime' needs the training bars' labels and a regime")
            sym_bar = np.argwhere(np.asarray(labels)[:, self.window - 1 :] == regime)
            if not len(sym_bar):
                raise ValueError(f"start 'regime': no training bar is in regime {regime}")
            pick = sym_bar[rng.integers(len(sym_bar), size=paths)]
            # the state after that bar is the one before bar + 1
            sym, bar = pick[:, 0], pick[:, 1] + self.window
        else:
            sym = rng.integers(n_sym, size=paths)
            bar = (
                np.full(paths, n_bars)
                if how == "end"
                else rng.integers(self.window, n_bars, size=paths)
            )
        return self.filt.state_at(self.ret, self.var, self.prem, sym, bar), self.coded[
            sym, bar - 1
        ].copy()

    def cond(self, state: FilterState, prev: np.ndarray) -> np.ndarray:
        """(N, C) float32 state of each path's next bar, as ``training_rows``
        gives for real bars."""
        cols = np.stack([np.log(state.var), state.prem], axis=1)
        return np.concatenate([(cols - self.cond_mean) / self.cond_std, prev], axis=1).astype(
            np.float32
        )

    def return_residual(self, coded: torch.Tensor) -> torch.Tensor:
        """The return's standardised residual z of coded rows (..., F), in torch (differentiable):
        what the variance recursion reads (wgan_gp.py's moment loss)."""
        i = self.filt.names.index("ret")
        u = coded[..., i] * float(self.coder.std[i]) + float(self.coder.mean[i])
        return self.coder.marginals[i].heavy_torch(u)

    def residuals(
        self, coded: np.ndarray, state: FilterState, calibration: Calibration | None = None
    ) -> np.ndarray:
        """Residual vectors (N, F) of coded rows, the return's scaled by ``calibration`` at the
        state's variance."""
        resid = self.coder.decode(coded)
        if calibration is not None:
            i = self.filt.names.index("ret")
            resid[:, i] *= calibration.factor(resid[:, i], np.log(state.var))
        return resid

    def step(
        self, coded: np.ndarray, state: FilterState, calibration: Calibration | None = None
    ) -> np.ndarray:
        """Bars (N, F) from coded residuals (N, F); advances ``state``."""
        return self.filt.step(self.residuals(coded, state, calibration), state)

    def state_dict(self) -> dict[str, Any]:
        return {
            "filter": self.filt.state_dict(),
            "coder": self.coder.state_dict(),
            "cond_mean": self.cond_mean.tolist(),
            "cond_std": self.cond_std.tolist(),
            "ret": self.ret,
            "var": self.var,
            "prem": self.prem,
            "coded": self.coded,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "Transform":
        return cls(
            BarFilter.from_state_dict(state["filter"]),
            ResidualCoder.from_state_dict(state["coder"]),
            np.asarray(state["cond_mean"]),
            np.asarray(state["cond_std"]),
            np.asarray(state["ret"]),
            np.asarray(state["var"]),
            np.asarray(state["prem"]),
            np.asarray(state["coded"]),
        )
