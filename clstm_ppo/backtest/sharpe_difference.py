"""Is one strategy's Sharpe ratio higher than another's? The test of Ledoit and Wolf (2008, "Robust
performance hypothesis testing with the Sharpe ratio", Journal of Empirical Finance 15:850) on two
strategies' paired daily returns over the T-bill (docs/BACKTEST.md, "Is the difference real?").

The difference of the two Sharpe ratios is a smooth function of four means (each strategy's mean and
mean square); its standard error comes from the delta method with a heteroskedasticity- and
autocorrelation-consistent (HAC) covariance of those four series, so fat tails, volatility
clustering and the two strategies' correlation all count. The interval and p-value come from a
studentized circular block bootstrap (arch's resampling, its block length chosen from the data by
Politis and White's rule): each resample's difference is divided by its own standard error, computed
from the resample's blocks, which is what keeps the coverage right where a plain percentile interval
of few, dependent observations is not.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class SharpeDifference:
    """Annualised Sharpe ratios over the T-bill of strategies a and b, their difference a - b, and
    what the data say about it: the HAC standard error, the two-sided bootstrap interval and p-value
    (H0: no difference), and ``edge_ruled_out``, the one-sided upper bound: the data rule out (at
    ``level``) that a beats b by more."""

    sharpe_a: float
    sharpe_b: float
    difference: float
    hac_se: float
    ci_low: float
    ci_high: float
    p_value: float
    edge_ruled_out: float
    days: int
    correlation: float
    block_length: int
    resamples: int
    level: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def _moments(x: np.ndarray) -> np.ndarray:
    """(..., 4): the means of a, b, a^2 and b^2 over the last-but-one axis of ``x`` (..., T, 2)."""
    return np.concatenate([x.mean(axis=-2), (x * x).mean(axis=-2)], axis=-1)


def _difference_and_gradient(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-bar Sharpe difference f(m) = mu_a / sd_a - mu_b / sd_b from the moments ``m`` (..., 4),
    and its gradient in m (..., 4)."""
    mu_a, mu_b, sq_a, sq_b = np.moveaxis(m, -1, 0)
    var_a, var_b = sq_a - mu_a**2, sq_b - mu_b**2
    diff = mu_a / np.sqrt(var_a) - mu_b / np.sqrt(var_b)
    grad = np.stack(
        [sq_a / var_a**1.5, -sq_b / var_b**1.5, -mu_a / (2 * var_a**1.5), mu_b / (2 * var_b**1.5)],
        -1,
    )
    return diff, grad


def _newey_west(y: np.ndarray, lags: int) -> np.ndarray:
    """The long-run covariance of the rows of ``y`` (T, k) (demeaned here), Bartlett
    weights up to ``lags``."""
    y = y - y.mean(axis=0)
    t = len(y)
    cov = y.T @ y / t
    for lag in range(1, lags + 1):
        gamma = y[lag:].T @ y[:-lag] / t
        cov += (1.0 - lag / (lags + 1.0)) * (gamma + gamma.T)
    return cov


def newey_west_lags(days: int) -> int:
    """The usual automatic bandwidth, floor(4 (T / 100)^(2/9)): 9 lags for 16 years of days."""
    return int(4.0 * (days / 100.0) ** (2.0 / 9.0))


def hac_standard_error(
    a: np.ndarray, b: np.ndarray, lags: int | None = None
) -> tuple[float, float]:
    """(difference, its standard error), both per bar, of a's and b's Sharpe ratios (returns
    over the T-bill)."""
    x = np.stack([a, b], axis=-1)
    diff, grad = _difference_and_gradient(_moments(x))
    y = np.concatenate([x, x * x], axis=-1)
    psi = _newey_west(y, newey_west_lags(len(x)) if lags is None else lags)
    return float(diff), float(math.sqrt(max(grad @ psi @ grad, 0.0) / len(x)))


def _block_length(y: np.ndarray) -> int:
    """Politis and White's (2004, with Patton et al.'s 2009 correction) circular block length, the
    largest over the four moment series, at least 1."""
    from arch.bootstrap import optimal_block_length

    return max(1, math.ceil(float(optimal_block_length(y)["circular"].max())))


CHUNK = 256  # resamples at a time: 16 years of days x 256 resamples x 4 moments is 33 MB


def _chunks(total: int, size: int) -> list[int]:
    return [min(size, total - start) for start in range(0, total, size)]


def _studentized(x: np.ndarray, index: np.ndarray, block: int, diff: float) -> np.ndarray:
    """(Delta* - Delta) / se* of each resample ``index`` (R, T) of the paired series ``x`` (T, 2),
    se* from the resample's own blocks (its first T // block blocks of ``block`` bars), as Ledoit
    and Wolf's studentized bootstrap takes it; resamples with no spread are dropped."""
    star = x[index]  # (R, T, 2)
    star_diff, star_grad = _difference_and_gradient(_moments(star))
    blocks = len(x) // block
    ys = np.concatenate([star, star * star], axis=-1)[:, : blocks * block]
    sums = (ys - ys.mean(axis=1, keepdims=True)).reshape(len(index), blocks, block, 4).sum(
        axis=2
    ) / math.sqrt(block)
    psi = np.einsum("rjk,rjl->rkl", sums, sums) / blocks
    star_se = np.sqrt(
        np.maximum(np.einsum("rk,rkl,rl->r", star_grad, psi, star_grad), 0.0) / len(x)
    )
    ok = np.isfinite(star_diff) & (star_se > 0)
    return (star_diff[ok] - diff) / star_se[ok]


def check_paired(a: np.ndarray, b: np.ndarray, periods_per_year: float) -> None:
    """ValueError (one line) unless ``a`` and ``b`` are equally long finite series of at least a
    year of bars, neither constant."""
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"the two return series must be paired: {a.shape} against {b.shape} bars")
    bad = int((~np.isfinite(a)).sum() + (~np.isfinite(b)).sum())
    if bad:
        raise ValueError(
            f"{bad} return(s) are NaN or infinite; drop or fill those days in both series first"
        )
    if len(a) < periods_per_year:
        raise ValueError(
            f"only {len(a)} common bars, less than a year ({periods_per_year:g}): a Sharpe "
            "difference needs at least a year of paired returns"
        )
    for name, x in (("first", a), ("second", b)):
        if float(np.std(x)) <= 1e-12 * max(1.0, float(np.abs(x).max())):
            raise ValueError(f"the {name} series is constant: it has no Sharpe ratio to compare")


def _sharpe(r: np.ndarray, root: float) -> float:
    """The annualised Sharpe ratio the moments give (per bar, times ``root``)."""
    return float(r.mean() / r.std()) * root


def sharpe_difference(
    a: np.ndarray,
    b: np.ndarray,
    periods_per_year: float = 252.0,
    resamples: int = 4999,
    level: float = 0.95,
    seed: int = 0,
    block_length: int | None = None,
) -> SharpeDifference:
    """Ledoit and Wolf's test of Sharpe(a) - Sharpe(b) on paired per-bar returns over the T-bill
    ``a`` and ``b`` (one value per test day, each day once), annualised at ``periods_per_year``.
    ``block_length``: the bootstrap's blocks (default: chosen from the data)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    check_paired(a, b, periods_per_year)
    from arch.bootstrap import CircularBlockBootstrap

    x = np.stack([a, b], axis=-1)
    y = np.concatenate([x, x * x], axis=-1)
    diff, se = hac_standard_error(a, b)
    block = block_length or _block_length(y)
    boot = CircularBlockBootstrap(block, x, seed=np.random.default_rng(seed))
    t_star = np.concatenate(
        [
            _studentized(x, np.stack([boot.update_indices() for _ in range(n)]), block, diff)
            for n in _chunks(resamples, CHUNK)
        ]
    )
    root = math.sqrt(periods_per_year)
    if len(t_star):
        width = float(np.quantile(np.abs(t_star), level)) * se
        upper = diff - float(np.quantile(t_star, 1.0 - level)) * se
        p = (
            (int(np.sum(np.abs(t_star) >= abs(diff) / se)) + 1) / (len(t_star) + 1)
            if se > 0
            else 1.0
        )
    else:
        # no resample moves the difference (b is a, or a multiple of it: an agent that walks its
        # rule exactly): it is known, with nothing to test
        width, upper, p = 0.0, diff, 1.0 if abs(diff) <= 1e-12 else 0.0
    return SharpeDifference(
        sharpe_a=_sharpe(a, root),
        sharpe_b=_sharpe(b, root),
        difference=diff * root,
        hac_se=se * root,
        ci_low=(diff * root) - width * root,
        ci_high=(diff * root) + width * root,
        p_value=float(p),
        edge_ruled_out=upper * root,
        days=len(a),
        correlation=float(np.corrcoef(a, b)[0, 1]),
        block_length=block,
        resamples=len(t_star),
        level=level,
    )
