"""A fitted generator: its networks, the columns and scaling it learned, its regimes; checkpoint I/O and sampling.

This is the API the stress tests and augmentation call:

    gen = load_generator("scenarios/timegan.pt")
    frame = gen.sample_frame(paths=1000, length=252, regime=None, seed=0)   # OHLCV(+iv) table, one symbol a path
    raw = gen.sample_features(paths, length, regime, seed)                  # (N, L, F) unscaled columns
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from clstm_ppo.config import ConfigError
from clstm_ppo.scenarios.cgan import CGan
from clstm_ppo.scenarios.features import BASE_COLUMNS, Scaler, paths_frame, reconstruct
from clstm_ppo.scenarios.regimes import REGIMES, RegimeRule
from clstm_ppo.scenarios.timegan import TimeGan, TimeGanSettings
from clstm_ppo.scenarios.wgan_gp import WganGp, WganSettings
from clstm_ppo.training.checkpoint import FORMAT as AGENT_FORMAT
from clstm_ppo.training.checkpoint import CheckpointError, atomic_save, read_torch_file

FORMAT = "clstm_ppo-scenarios-v1"
# Bumped whenever features.py changes what a column means: a checkpoint of another feature set is refused.
FEATURE_SET = "bars-v1"
OPTIONAL_COLUMNS = ("dvol", "logiv")
MODELS = {"wgan_gp": (WganGp, WganSettings), "cgan": (CGan, WganSettings), "timegan": (TimeGan, TimeGanSettings)}
# Generator updates (WGAN-GP, cGAN) or iterations over the three phases (TimeGAN) for <= 10 minutes on a 2-core CPU.
DEFAULT_STEPS = {"wgan_gp": 2000, "cgan": 2000, "timegan": 4000}


def check_model(kind: str) -> None:
    if kind not in MODELS:
        raise ConfigError(f"--model {kind!r} is not a scenario model; choose one of: {', '.join(MODELS)}")


def build_model(kind: str, n_features: int, settings: dict[str, Any], device: torch.device) -> Any:
    check_model(kind)
    cls, settings_cls = MODELS[kind]
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()}
    return cls(n_features, settings_cls(**values), device)


@dataclass
class FittedGenerator:
    kind: str
    model: Any  # WganGp, CGan or TimeGan
    feature_names: tuple[str, ...]
    scaler: Scaler
    seq_len: int
    start: dict[str, Any]  # the last training bar: close, date[, volume][, iv][, rate]
    data: dict[str, Any]  # source, symbols, splits' dates: what it was fitted on
    regimes: RegimeRule | None = None
    step: int = 0
    total_steps: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # batch size, seed, RNG states: what a resume needs

    @property
    def regime_names(self) -> tuple[str, ...]:
        return REGIMES if self.regimes is not None else ()

    def check_regime(self, regime: str | None) -> int | None:
        if regime is None:
            return None
        if regime not in self.regime_names:
            known = ", ".join(self.regime_names) or "none (an unconditional model; drop --regime or use a cgan)"
            raise ConfigError(f"--regime {regime!r}: this {self.kind} checkpoint was trained with regimes: {known}")
        return self.regime_names.index(regime)

    def sample_scaled(self, paths: int, length: int, regime: str | None = None, seed: int = 0,
                      labels: np.ndarray | None = None) -> np.ndarray:
        """(N, L, F) float32 in the scaled units the model learned. ``labels`` (N, L) overrides ``regime`` per bar;
        a conditional model with neither draws each path's regime from the training split's label frequencies."""
        index = self.check_regime(regime)
        gen = torch.Generator().manual_seed(seed)
        if self.regimes is not None and labels is None:
            if index is None:
                freq = torch.tensor(self.extra.get("label_freq", [1.0] * len(REGIMES)), dtype=torch.float64)
                index_per_path = torch.multinomial(freq, paths, replacement=True, generator=gen)
                labels = index_per_path[:, None].expand(paths, length).numpy()
            else:
                labels = np.full((paths, length), index)
        cond = None if labels is None else torch.as_tensor(np.asarray(labels), dtype=torch.long,
                                                          device=self.model.device)
        if self.kind == "timegan" and length > self.seq_len:
            # TimeGAN's GRUs, run past the window they learned on, settle into a fixed point (measured on the
            # S&P 500: the return column's std fell to 0 by bar 200, docs/SCENARIOS.md); longer paths are
            # windows of seq_len bars laid end to end, each from a fresh state.
            chunks = -(-length // self.seq_len)
            out = self.model.sample(paths * chunks, self.seq_len, None, gen).cpu().numpy()
            return out.reshape(paths, chunks * self.seq_len, -1)[:, :length]
        return self.model.sample(paths, length, cond, gen).cpu().numpy()

    def sample_features(self, paths: int, length: int, regime: str | None = None, seed: int = 0) -> np.ndarray:
        """(N, L, F) raw columns (feature_names), unscaled with the training-split statistics."""
        return self.scaler.invert(self.sample_scaled(paths, length, regime, seed))

    def sample_prices(self, paths: int, length: int, regime: str | None = None, seed: int = 0,
                      start: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
        """open/high/low/close[/volume][/iv] arrays (N, L) continuing from ``start`` (default: the last training
        bar)."""
        return reconstruct(self.sample_features(paths, length, regime, seed), self.feature_names, start or self.start)

    def sample_frame(self, paths: int, length: int, regime: str | None = None, seed: int = 0,
                     start: dict[str, Any] | None = None, first_date: str | None = None) -> pd.DataFrame:
        """A table the data loader reads (date, symbol, OHLC[, volume][, iv][, rate]); one symbol per path."""
        start = start or self.start
        return paths_frame(self.sample_prices(paths, length, regime, seed, start), start, first_date)

    def state(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "feature_set": FEATURE_SET, "kind": self.kind,
            "settings": asdict(self.model.settings), "model": self.model.state_dict(),
            "feature_names": list(self.feature_names), "scaler": self.scaler.state_dict(), "seq_len": self.seq_len,
            "start": self.start, "data": self.data,
            "regimes": None if self.regimes is None else self.regimes.state_dict(),
            "step": self.step, "total_steps": self.total_steps, "extra": self.extra,
        }

    def save(self, path: Path) -> None:
        atomic_save(self.state(), Path(path))


def _check_feature_set(state: dict[str, Any], path: Path) -> tuple[str, ...]:
    names = tuple(state.get("feature_names") or ())
    known = names[:len(BASE_COLUMNS)] == BASE_COLUMNS and all(n in OPTIONAL_COLUMNS for n in names[len(BASE_COLUMNS):])
    if state.get("feature_set") != FEATURE_SET or not known:
        raise CheckpointError(f"{path} was written for another feature set ({state.get('feature_set')!r}: "
                              f"{', '.join(names) or 'no columns'}); this version reads {FEATURE_SET!r} "
                              f"({', '.join(BASE_COLUMNS)}[, {', '.join(OPTIONAL_COLUMNS)}]): retrain it")
    return names


def load_generator(path: str | Path, device: torch.device | None = None) -> FittedGenerator:
    """A generator checkpoint, or a one-line CheckpointError (missing, corrupt, an agent's, another feature set)."""
    path = Path(path)
    state = read_torch_file(path, "scenario checkpoint", "`python -m clstm_ppo.scenarios train` writes "
                            "DIR/<model>.pt", "train it again")
    if isinstance(state, dict) and state.get("format") == AGENT_FORMAT:
        raise CheckpointError(f"{path} is an agent checkpoint (python -m clstm_ppo.train); pass a scenario "
                              "generator's checkpoint (python -m clstm_ppo.scenarios train)")
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a scenario generator checkpoint (no '{FORMAT}' marker)")
    names = _check_feature_set(state, path)
    if state.get("kind") not in MODELS:
        raise CheckpointError(f"{path} holds a model of unknown kind {state.get('kind')!r}; "
                              f"this version knows {', '.join(MODELS)}")
    device = device or torch.device("cpu")
    model = build_model(state["kind"], len(names), state["settings"], device)
    model.load_state_dict(state["model"])
    if hasattr(model, "total_steps"):
        model.total_steps = max(int(state["total_steps"]), 1)
    rule = None if state["regimes"] is None else RegimeRule.from_state_dict(state["regimes"])
    return FittedGenerator(kind=state["kind"], model=model, feature_names=names,
                           scaler=Scaler.from_state_dict(state["scaler"]), seq_len=int(state["seq_len"]),
                           start=dict(state["start"]), data=dict(state["data"]), regimes=rule,
                           step=int(state["step"]), total_steps=int(state["total_steps"]), extra=dict(state["extra"]))
