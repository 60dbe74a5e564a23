"""Volatility as state: a GJR-GARCH(1,1) filter turns each training bar into a vector of
standardised residuals, and running the filter forward turns residual vectors (drawn by a model, or
resampled) back into bars.

Per underlying, on its training-split close-to-close log returns r (in percent,
as ``arch`` prefers):
    e_t = 100 r_t - mu,   var_{t+1} = omega + (alpha + gamma * [e_t < 0]) * e_t^2 + beta * var_t
fitted by quasi-maximum likelihood (``arch``, normal likelihood: the residuals' own distribution is
what the models learn, or what filtered historical simulation resamples). The residual vector of bar
t (s_t = sqrt(var_t) / 100, the bar's forecast volatility as a return):

    gap   -> gap_t / s_t               ret  -> (100 r_t - mu) / sqrt(var_t)
    up    -> sqrt(up_t / s_t)          down -> sqrt(down_t / s_t)
                                       (wicks scale with volatility; >= 0)
    dvol  -> dvol_t                    (volume changes are their own scale)
    logiv -> the innovation of the implied vol's premium over the filter:
             p_t = logiv_t - log(sqrt(252 var_{t+1})/100),
             p_t = a + phi p_{t-1} + innovation (AR(1) by least squares, pooled over underlyings)

so a generated path's volatility, wicks and implied vol all follow one volatility state, a regime is
a volatility state and not only a drift, and any path length keeps the volatility inside its fitted
dynamics. When simulating, the variance is kept within the training split's filtered range, so no
path's volatility runs away or dies out (docs/SCENARIOS.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from arch import arch_model

PERCENT = 100.0
YEAR = 252
MAX_PHI = 0.999  # the premium's AR(1) coefficient is kept stationary


@dataclass(frozen=True)
class Garch:
    """One underlying's GJR-GARCH(1,1) variance recursion in percent units, and its
    training variance range."""

    mu: float
    omega: float
    alpha: float
    gamma: float
    beta: float
    var0: float  # arch's backcast: the variance of the first training bar
    var_lo: float
    var_hi: float

    @classmethod
    def fit(cls, ret: np.ndarray, asymmetric: bool = True) -> "Garch":
        res = arch_model(
            np.asarray(ret, dtype=np.float64) * PERCENT,
            mean="Constant",
            vol="GARCH",
            p=1,
            o=int(asymmetric),
            q=1,
            dist="normal",
            rescale=False,
        ).fit(disp="off")
        p = res.params
        var = np.asarray(res.conditional_volatility, dtype=np.float64) ** 2
        return cls(
            float(p["mu"]),
            float(p["omega"]),
            float(p["alpha[1]"]),
            float(p.get("gamma[1]", 0.0)),
            float(p["beta[1]"]),
            float(var[0]),
            float(var.min()),
            float(var.max()),
        )

    def next_var(self, var: np.ndarray, e: np.ndarray) -> np.ndarray:
        return self.omega + (self.alpha + self.gamma * (e < 0)) * e * e + self.beta * var

    def filter(self, ret: np.ndarray) -> np.ndarray:
        """(T + 1,) variances: var[t] is bar t's forecast from bars before it;
        var[T] the next bar's."""
        var = np.empty(len(ret) + 1)
        var[0] = self.var0
        e = np.asarray(ret, dtype=np.float64) * PERCENT - self.mu
        for t in range(len(ret)):  # sequential in time by definition
            var[t + 1] = self.next_var(var[t], e[t])
        return var

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FilterState:
    """Where N paths stand before their next bar: underlying, the next bar's variance
    (percent^2), the implied vol's premium at the last bar, and the last ``window`` log
    returns (oldest first)."""

    sym: np.ndarray  # (N,) int
    var: np.ndarray  # (N,)
    prem: np.ndarray  # (N,)
    rets: np.ndarray  # (N, window)


@dataclass
class BarFilter:
    names: tuple[str, ...]
    garch: list[Garch]  # one per underlying
    iv_ar: tuple[float, float]  # (a, phi) of the premium; (0, 0) without an implied vol column
    window: int  # trailing returns a state keeps (the regime rule's window)

    @classmethod
    def fit(
        cls, raw: np.ndarray, names: tuple[str, ...], window: int, asymmetric: bool = True
    ) -> "BarFilter":
        """From training-split columns (S, T, F) alone."""
        ret = raw[..., names.index("ret")]
        garch = [Garch.fit(r, asymmetric) for r in ret]
        out = cls(tuple(names), garch, (0.0, 0.0), window)
        if "logiv" in names:
            prem = out._premium(
                raw, np.stack([g.filter(r) for g, r in zip(garch, ret, strict=True)])
            )
            x, y = prem[:, :-1].ravel(), prem[:, 1:].ravel()
            (a, phi), *_ = np.linalg.lstsq(np.stack([np.ones_like(x), x], axis=1), y, rcond=None)
            out.iv_ar = (float(a), float(np.clip(phi, -MAX_PHI, MAX_PHI)))
        return out

    def _premium(self, raw: np.ndarray, var: np.ndarray) -> np.ndarray:
        return raw[..., self.names.index("logiv")] - np.log(np.sqrt(YEAR * var[:, 1:]) / PERCENT)

    def variances(self, raw: np.ndarray) -> np.ndarray:
        """(S, T + 1) filtered variances of each underlying's bars (S, T, F)."""
        ret = raw[..., self.names.index("ret")]
        return np.stack([g.filter(r) for g, r in zip(self.garch, ret, strict=True)])

    def residuals(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Residual vectors (S, T, F) of bars (S, T, F), with the variances (S, T + 1)
        and premiums (S, T)."""
        var = self.variances(raw)
        sd = np.sqrt(var[:, :-1]) / PERCENT
        mu = np.array([g.mu for g in self.garch])[:, None]
        out = np.empty_like(raw, dtype=np.float64)
        prem = np.zeros(raw.shape[:2])
        for i, name in enumerate(self.names):
            x = raw[..., i]
            if name == "gap":
                out[..., i] = x / sd
            elif name == "ret":
                out[..., i] = (x * PERCENT - mu) / np.sqrt(var[:, :-1])
            elif name in ("up", "down"):
                out[..., i] = np.sqrt(np.maximum(x, 0.0) / sd)
            elif name == "dvol":
                out[..., i] = x
            else:
                # logiv: the premium's innovation; the first bar has no previous premium
                # and counts as its own
                prem = self._premium(raw, var)
                a, phi = self.iv_ar
                before = np.concatenate([prem[:, :1], prem[:, :-1]], axis=1)
                out[..., i] = prem - a - phi * before
        return out, var, prem

    def state_at(
        self, ret: np.ndarray, var: np.ndarray, prem: np.ndarray, sym: np.ndarray, bar: np.ndarray
    ) -> FilterState:
        """The state before bar ``bar`` (>= window) of underlying ``sym`` (arrays (N,)), from that
        underlying's training returns (S, T), variances (S, T + 1) and premiums (S, T); ``bar`` = T:
        after the last bar."""
        rows = bar[:, None] - self.window + np.arange(self.window)
        return FilterState(
            sym.copy(), var[sym, bar].copy(), prem[sym, bar - 1].copy(), ret[sym[:, None], rows]
        )

    def _pick(self, key: str, sym: np.ndarray) -> np.ndarray:
        return np.array([getattr(g, key) for g in self.garch])[sym]

    def returns(self, z: np.ndarray, state: FilterState) -> np.ndarray:
        """The log returns (N,) of return residuals z (N,) in ``state``."""
        return (self._pick("mu", state.sym) + np.sqrt(state.var) * z) / PERCENT

    def step(self, resid: np.ndarray, state: FilterState) -> np.ndarray:
        """Bars (N, F) from residual vectors (N, F); advances ``state`` in place."""
        pick = lambda key: self._pick(key, state.sym)  # noqa: E731
        sd = np.sqrt(state.var) / PERCENT
        col = {n: resid[:, i] for i, n in enumerate(self.names)}
        ret = self.returns(col["ret"], state)
        e = ret * PERCENT - pick("mu")
        var = (
            pick("omega")
            + (pick("alpha") + pick("gamma") * (e < 0)) * e * e
            + pick("beta") * state.var
        )
        var = np.clip(var, pick("var_lo"), pick("var_hi"))
        out = np.empty((len(ret), len(self.names)))
        for i, name in enumerate(self.names):
            if name == "gap":
                out[:, i] = sd * col["gap"]
            elif name == "ret":
                out[:, i] = ret
            elif name in ("up", "down"):
                out[:, i] = sd * col[name] ** 2
            elif name == "dvol":
                out[:, i] = col["dvol"]
            else:
                a, phi = self.iv_ar
                state.prem = a + phi * state.prem + col["logiv"]
                out[:, i] = state.prem + np.log(np.sqrt(YEAR * var) / PERCENT)
        state.var = var
        state.rets = np.concatenate([state.rets[:, 1:], ret[:, None]], axis=1)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "names": list(self.names),
            "garch": [g.state_dict() for g in self.garch],
            "iv_ar": list(self.iv_ar),
            "window": self.window,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> "BarFilter":
        return cls(
            tuple(state["names"]),
            [Garch(**g) for g in state["garch"]],
            tuple(state["iv_ar"]),
            int(state["window"]),
        )
