"""The report's figures: return histograms (log scale), ACF of r and |r|, leverage curves, paths
beside real ones."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from clstm_ppo.scenarios.generator import FittedGenerator  # noqa: E402
from clstm_ppo.scenarios.stylised_facts import MAX_LAG, acf, leverage  # noqa: E402

SHOWN_PATHS = 20


def _save(fig: plt.Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _curves(real: np.ndarray, fakes: dict[str, np.ndarray], lag: int, out: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    lags = np.arange(1, lag + 1)
    for ax, title, fn in (
        (axes[0], "ACF of r", lambda x: acf(x, lag)),
        (axes[1], "ACF of |r|", lambda x: acf(np.abs(x), lag)),
        (axes[2], "leverage corr(r_t, r_{t+k}^2)", lambda x: leverage(x, lag)),
    ):
        ax.plot(lags, fn(real), color="black", lw=2, label="real (held out)")
        for name, fake in fakes.items():
            ax.plot(lags, fn(fake), lw=1, label=name)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_title(title)
        ax.set_xlabel("lag (bars)")
    axes[0].legend()
    _save(fig, out)


def _histograms(real: np.ndarray, fakes: dict[str, np.ndarray], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lim = float(np.quantile(np.abs(real), 0.999)) * 1.5
    bins = np.linspace(-lim, lim, 81)
    ax.hist(
        real.ravel(),
        bins=bins,
        density=True,
        histtype="step",
        color="black",
        lw=2,
        label="real (held out)",
    )
    for name, fake in fakes.items():
        ax.hist(
            np.clip(fake.ravel(), -lim, lim), bins=bins, density=True, histtype="step", label=name
        )
    ax.set_yscale("log")
    ax.set_xlabel("daily log return")
    ax.legend()
    _save(fig, out)


def _paths(real_close: np.ndarray, fake_close: np.ndarray, title: str, out: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    length = fake_close.shape[1]
    n_real = max(real_close.shape[1] // length, 1)
    for i in range(min(SHOWN_PATHS, n_real * real_close.shape[0])):
        s, k = divmod(i, n_real)
        piece = real_close[s % real_close.shape[0], k * length : (k + 1) * length]
        if len(piece) > 1:
            axes[0].plot(piece / piece[0], lw=0.8)
    axes[0].set_title("real (held out), consecutive stretches")
    for row in fake_close[:SHOWN_PATHS]:
        axes[1].plot(row / row[0], lw=0.8)
    axes[1].set_title(title)
    for ax in axes:
        ax.set_xlabel("bar")
    axes[0].set_ylabel("price / first close")
    _save(fig, out)


def write_plots(
    folder: Path,
    real: np.ndarray,
    fakes: dict[str, np.ndarray],
    real_close: np.ndarray,
    gen: FittedGenerator,
    length: int,
    seed: int,
) -> list[Path]:
    """Write the figures into ``folder``; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    lag = min(MAX_LAG, length - 1, real.shape[-1] - 1)
    written = [folder / "returns_hist.png", folder / "acf_leverage.png"]
    _histograms(real, fakes, written[0])
    _curves(real, fakes, lag, written[1])
    for regime in (None, *gen.regime_names):
        close = gen.sample_prices(SHOWN_PATHS, length, regime, seed)["close"]
        path = folder / f"paths_{regime or 'all'}.png"
        _paths(real_close, close, f"{gen.kind} {regime or ''}".strip(), path)
        written.append(path)
    return written
