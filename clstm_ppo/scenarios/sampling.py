"""Drawing paths from a fitted generator, bar by bar through the volatility filter
(coding.py, filtering.py).

- WGAN-GP and cGAN draw each bar's coded residuals given the bar's state (and regime); the filter
  turns them into the bar and the next state. A conditional model given no regime draws its regimes
  as a Markov chain with the training split's regime-to-regime transition frequencies, from the
  start's own label, so regimes persist and switch as they did in training.
- A requested regime is held: the cGAN proposes ``proposals`` bars for each path and the path takes
  the first whose regime window (the window's returns, labelled as regime_labels.py labels real
  bars) keeps the requested label, or, if none does, the one whose window return is nearest the
  regime's mean in training. This is rejection sampling of the cGAN's bars conditioned on the
  regime's own definition; ``proposals=1`` is the network alone.
- TimeGAN draws windows of coded residuals, laid end to end from fresh noise, and the filter
  turns them into bars.

Every path starts from a state of the training split: after its last bar (``start="end"``: what
follows the training years, as the held-out bars and the stress tests' paths do), before a random
training bar (``"random"``: windows like the training split's, for the judges) or after a random
training bar of the requested regime (``"regime"``: where that regime's real bars are, for the
report's per-regime vol and skew).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from clstm_ppo.scenarios.filtering import FilterState
from clstm_ppo.scenarios.regime_labels import trailing
from clstm_ppo.scenarios.residual_scale import Calibration

DRAWS_PER_ROW = 8  # generated residuals per training state when calibrating
TIMEGAN_WINDOWS = 2000
PROPOSALS = 16  # bars proposed per path and bar when a regime is held


def transitions(labels: np.ndarray, n: int) -> np.ndarray:
    """(n, n) row-stochastic regime-to-regime frequencies of per-bar labels (S, T); a regime
    never left: uniform."""
    counts = np.zeros((n, n))
    for row in np.asarray(labels):
        np.add.at(counts, (row[:-1], row[1:]), 1.0)
    total = counts.sum(axis=1, keepdims=True)
    return np.where(total > 0, counts / np.maximum(total, 1.0), 1.0 / n)


def _markov(matrix: np.ndarray, last: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    cum = np.cumsum(matrix[last], axis=1)
    return np.minimum((rng.random(len(last))[:, None] > cum).sum(axis=1), matrix.shape[0] - 1)


def _window_means(gen: Any) -> np.ndarray:
    """The mean window return of the training bars of each regime."""
    total, _ = trailing(gen.transform.ret, gen.regimes.window)
    labels = gen.regimes.label(gen.transform.ret)
    return np.array(
        [
            np.nanmean(np.where(labels == k, total, np.nan)) if (labels == k).any() else 0.0
            for k in range(len(gen.extra["transitions"]))
        ]
    )


def _held(
    gen: Any,
    state: FilterState,
    prev: np.ndarray,
    regime: int,
    proposals: int,
    means: np.ndarray,
    tgen: torch.Generator,
) -> np.ndarray:
    """(N, F) coded rows: per path, the first of ``proposals`` cGAN bars that keeps ``regime``
    (else the nearest)."""
    tf, n, k = gen.transform, len(state.var), proposals
    cond = np.repeat(tf.cond(state, prev), k, axis=0)
    coded = gen.model.draw(
        torch.from_numpy(cond), torch.full((n * k,), regime, dtype=torch.long), tgen
    )
    coded = gen.calibration.coded(coded.cpu().numpy().astype(np.float64), np.asarray(regime))
    rep = FilterState(
        np.repeat(state.sym, k),
        np.repeat(state.var, k),
        np.repeat(state.prem, k),
        np.repeat(state.rets, k, axis=0),
    )
    z = tf.residuals(coded, rep, gen.calibration)[:, tf.filt.names.index("ret")]
    window = np.concatenate([rep.rets[:, 1:], tf.filt.returns(z, rep)[:, None]], axis=1)
    keeps = (gen.regimes.label(window)[:, -1] == regime).reshape(n, k)
    nearest = np.argmin(np.abs(window.sum(axis=1) - means[regime]).reshape(n, k), axis=1)
    choice = np.where(keeps.any(axis=1), keeps.argmax(axis=1), nearest)
    return coded.reshape(n, k, -1)[np.arange(n), choice]


def draw_paths(
    gen: Any,
    paths: int,
    length: int,
    regime: int | None,
    seed: int,
    labels: np.ndarray | None,
    start: str,
    proposals: int = PROPOSALS,
) -> np.ndarray:
    """(N, L, F) raw columns of ``gen`` (a FittedGenerator); ``labels`` (N, L) overrides
    ``regime`` per bar."""
    rng = np.random.default_rng(seed)
    tgen = torch.Generator().manual_seed(seed)
    tf = gen.transform
    if start == "regime" and (gen.regimes is None or regime is None):
        raise ValueError("start 'regime' is for a conditional model given a regime")
    bar_labels = gen.regimes.label(tf.ret) if start == "regime" else None
    state, prev = tf.start(paths, rng, start, bar_labels, regime)
    out = np.empty((paths, length, len(gen.feature_names)))
    if gen.kind == "timegan":
        chunks = -(-length // gen.seq_len)
        coded = gen.model.sample(paths * chunks, gen.seq_len, None, tgen).cpu().numpy()
        coded = gen.calibration.coded(
            coded.reshape(paths, chunks * gen.seq_len, -1)[:, :length].astype(np.float64)
        )
        for t in range(length):
            out[:, t] = tf.step(coded[:, t], state, gen.calibration)
        return out
    conditional = gen.regimes is not None
    matrix = np.asarray(gen.extra["transitions"]) if conditional else None
    drawn = gen.regimes.label(state.rets)[:, -1] if conditional else None  # the start's own regime
    means = _window_means(gen) if conditional and regime is not None and proposals > 1 else None
    for t in range(length):
        lab = None
        if means is not None:
            coded = _held(gen, state, prev, regime, proposals, means, tgen)
        else:
            if conditional:
                if labels is not None:
                    drawn = np.asarray(labels)[:, t]
                elif regime is not None:
                    drawn = np.full(paths, regime)
                else:
                    drawn = _markov(matrix, drawn, rng)
                lab = torch.as_tensor(drawn, dtype=torch.long)
            coded = gen.model.draw(torch.from_numpy(tf.cond(state, prev)), lab, tgen).cpu().numpy()
            coded = gen.calibration.coded(coded.astype(np.float64), drawn)
        out[:, t] = tf.step(coded, state, gen.calibration)
        prev = coded.astype(np.float32)
    return out


def calibrate(gen: Any, labels: np.ndarray, seed: int = 0) -> Calibration:
    """The calibration (residual_scale.py) of ``gen`` on its training split's states: first
    the coded columns' quantile map, then the return residual's scale per band of the
    variance, measured after that map; ``labels`` (S, T) the training bars' regimes (for a
    conditional model's draws)."""
    tf = gen.transform
    coded, cond = tf.training_rows()
    w, f = tf.window, coded.shape[-1]
    ret = tf.filt.names.index("ret")
    real = coded[:, w:].reshape(-1, f).astype(np.float64)
    real_z = tf.coder.decode(real)[:, ret]
    tgen = torch.Generator().manual_seed(seed)
    maps: dict[str, Any] = {}  # a conditional model's quantile maps per regime
    real_labels = None
    if gen.kind == "timegan":  # windows drawn whole, without a state: one band
        windows = (
            gen.model.sample(TIMEGAN_WINDOWS, gen.seq_len, None, tgen).cpu().numpy().reshape(-1, f)
        )
        generated, logvar = windows.astype(np.float64), np.empty(0)

        def draw_coded(_pick: np.ndarray) -> np.ndarray:
            return generated
    else:
        rows = torch.from_numpy(np.ascontiguousarray(cond[:, w:].reshape(-1, cond.shape[-1])))
        real_labels = labels[:, w:].reshape(-1) if gen.regimes is not None else None
        lab = None if real_labels is None else torch.as_tensor(real_labels, dtype=torch.long)

        def draw_coded(pick: np.ndarray) -> np.ndarray:
            idx = torch.as_tensor(np.repeat(pick, DRAWS_PER_ROW))
            return (
                gen.model.draw(rows[idx], None if lab is None else lab[idx], tgen)
                .cpu()
                .numpy()
                .astype(np.float64)
            )

        generated, logvar = draw_coded(np.arange(len(real))), np.log(tf.var[:, w:-1].reshape(-1))
        if real_labels is not None:  # the draws above are at every row in order, DRAWS_PER_ROW each
            regime_from, regime_to = Calibration.regime_quantiles(
                real,
                real_labels,
                generated,
                np.repeat(real_labels, DRAWS_PER_ROW),
                len(gen.extra["transitions"]),
            )
            maps = {"regime_from": regime_from, "regime_to": regime_to}
    src, dst = Calibration.coded_quantiles(real, generated)
    mapped = replace(Calibration.identity(), coded_from=src, coded_to=dst, **maps)

    def draw_z(pick: np.ndarray) -> np.ndarray:
        regimes = None if not maps else np.repeat(real_labels[pick], DRAWS_PER_ROW)
        return tf.coder.decode(mapped.coded(draw_coded(pick), regimes))[:, ret]

    cal = Calibration.fit(real_z, logvar, draw_z)
    return replace(cal, coded_from=src, coded_to=dst, **maps)
