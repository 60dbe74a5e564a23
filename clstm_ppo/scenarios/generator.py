"""A fitted generator: its networks, the columns and scaling it learned, its regimes;
checkpoint I/O and sampling.

This is the API the stress tests and augmentation call:

    gen = load_generator("scenarios/timegan.pt")
    frame = gen.sample_frame(paths=1000, length=252, regime=None,
                             seed=0)  # OHLCV(+iv) table, one symbol a path
    raw = gen.sample_features(paths, length, regime, seed)  # (N, L, F) bar columns
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from clstm_ppo.config import ConfigError, first_line
from clstm_ppo.run_files import run_state
from clstm_ppo.run_files.checkpoint import CheckpointError, atomic_save, read_torch_file
from clstm_ppo.run_files.safe_load import as_plain_data
from clstm_ppo.scenarios.bar_columns import BASE_COLUMNS, paths_frame, reconstruct
from clstm_ppo.scenarios.cgan import CGan
from clstm_ppo.scenarios.coding import Transform
from clstm_ppo.scenarios.regime_labels import REGIMES, RegimeRule
from clstm_ppo.scenarios.residual_scale import Calibration
from clstm_ppo.scenarios.sampling import PROPOSALS, draw_paths
from clstm_ppo.scenarios.timegan import TimeGan, TimeGanSettings
from clstm_ppo.scenarios.wgan_gp import WganGp, WganSettings

# v2: plain data only (numpy arrays saved as tensors), read with torch.load(weights_only=True); v1
# files had numpy arrays inside and are read only by `python -m clstm_ppo.migrate`
# (docs/RELIABILITY.md, "What is safe to load")
FORMAT = "clstm_ppo-scenarios-v2"
OLD_FORMAT = "clstm_ppo-scenarios-v1"
AGENT_FORMATS = (run_state.FORMAT, run_state.OLD_FORMAT)
# Bumped whenever what a model learns changes meaning: a checkpoint of
# another feature set is refused.
# v2: the volatility filter's coded residuals and each bar's state
# (coding.py) instead of standardised bars.
FEATURE_SET = "bars-v2"
OPTIONAL_COLUMNS = ("dvol", "logiv")
MODELS = {
    "wgan_gp": (WganGp, WganSettings),
    "cgan": (CGan, WganSettings),
    "timegan": (TimeGan, TimeGanSettings),
}
# Generator updates (WGAN-GP, cGAN) or iterations over the three phases (TimeGAN) that train within
# the budget on a 2-core CPU (docs/SCENARIOS.md has the times).
DEFAULT_STEPS = {"wgan_gp": 3000, "cgan": 3000, "timegan": 4000}


def check_model(kind: str) -> None:
    if kind not in MODELS:
        raise ConfigError(
            f"--model {kind!r} is not a scenario model; choose one of: {', '.join(MODELS)}"
        )


def build_model(
    kind: str, n_features: int, n_cond: int, settings: dict[str, Any], device: torch.device
) -> Any:
    check_model(kind)
    cls, settings_cls = MODELS[kind]
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()}
    return cls(n_features, n_cond, settings_cls(**values), device)


@dataclass
class FittedGenerator:
    kind: str
    model: Any  # WganGp, CGan or TimeGan
    feature_names: tuple[str, ...]
    # the volatility filter and the coding of its residuals, fitted on the training split
    transform: Transform
    seq_len: int
    start: dict[str, Any]  # the last training bar: close, date[, volume][, iv][, rate]
    data: dict[str, Any]  # source, symbols, splits' dates: what it was fitted on
    regimes: RegimeRule | None = None
    step: int = 0
    total_steps: int = 0
    # batch size, seed, RNG states, regime transitions, timing
    extra: dict[str, Any] = field(default_factory=dict)
    # set at every save (residual_scale.py)
    calibration: Calibration = field(default_factory=Calibration.identity)

    def __post_init__(self) -> None:
        if hasattr(self.model, "residual"):
            self.model.residual = self.transform.return_residual

    @property
    def regime_names(self) -> tuple[str, ...]:
        return REGIMES if self.regimes is not None else ()

    def check_regime(self, regime: str | None) -> int | None:
        if regime is None:
            return None
        if regime not in self.regime_names:
            known = (
                ", ".join(self.regime_names)
                or "none (an unconditional model; drop --regime or use a cgan)"
            )
            raise ConfigError(
                f"--regime {regime!r}: this {self.kind} checkpoint was trained "
                f"with regimes: {known}"
            )
        return self.regime_names.index(regime)

    def sample_features(
        self,
        paths: int,
        length: int,
        regime: str | None = None,
        seed: int = 0,
        labels: np.ndarray | None = None,
        start: str = "end",
        proposals: int = PROPOSALS,
    ) -> np.ndarray:
        """(N, L, F) raw columns (feature_names). ``labels`` (N, L) overrides ``regime`` per bar;
        ``start``: "end" continues from the training split's last bar's state, "random" from
        random training bars' states, "regime" from the states after random training bars of
        ``regime``; ``proposals``: bars proposed per bar to hold a requested regime (sampling.py;
        1: the network alone)."""
        return draw_paths(
            self, paths, length, self.check_regime(regime), seed, labels, start, proposals
        )

    def sample_prices(
        self,
        paths: int,
        length: int,
        regime: str | None = None,
        seed: int = 0,
        start: dict[str, Any] | None = None,
    ) -> dict[str, np.ndarray]:
        """open/high/low/close[/volume][/iv] arrays (N, L) continuing from ``start`` (default: the
        last training bar)."""
        return reconstruct(
            self.sample_features(paths, length, regime, seed),
            self.feature_names,
            start or self.start,
        )

    def sample_frame(
        self,
        paths: int,
        length: int,
        regime: str | None = None,
        seed: int = 0,
        start: dict[str, Any] | None = None,
        first_date: str | None = None,
    ) -> pd.DataFrame:
        """A table the data loader reads (date, symbol, OHLC[, volume][, iv][, rate]);
        one symbol per path."""
        start = start or self.start
        return paths_frame(
            self.sample_prices(paths, length, regime, seed, start), start, first_date
        )

    def state(self) -> dict[str, Any]:
        """What the checkpoint holds: tensors and plain values alone (numpy
        arrays become tensors)."""
        return as_plain_data(
            {
                "format": FORMAT,
                "feature_set": FEATURE_SET,
                "kind": self.kind,
                "settings": asdict(self.model.settings),
                "model": self.model.state_dict(),
                "feature_names": list(self.feature_names),
                "transform": self.transform.state_dict(),
                "seq_len": self.seq_len,
                "start": self.start,
                "data": self.data,
                "regimes": None if self.regimes is None else self.regimes.state_dict(),
                "step": self.step,
                "total_steps": self.total_steps,
                "extra": self.extra,
                "calibration": self.calibration.state_dict(),
            }
        )

    def save(self, path: Path) -> None:
        atomic_save(self.state(), Path(path))


def _check_feature_set(state: dict[str, Any], path: Path) -> tuple[str, ...]:
    names = tuple(state.get("feature_names") or ())
    known = names[: len(BASE_COLUMNS)] == BASE_COLUMNS and all(
        n in OPTIONAL_COLUMNS for n in names[len(BASE_COLUMNS) :]
    )
    if state.get("feature_set") != FEATURE_SET or not known:
        raise CheckpointError(
            f"{path} was written for another feature set ({state.get('feature_set')!r}: "
            f"{', '.join(names) or 'no columns'}); this version reads {FEATURE_SET!r} "
            f"({', '.join(BASE_COLUMNS)}[, {', '.join(OPTIONAL_COLUMNS)}]): retrain it"
        )
    return names


def load_generator(path: str | Path, device: torch.device | None = None) -> FittedGenerator:
    """A generator checkpoint, or a one-line CheckpointError (missing, corrupt, an agent's,
    another feature set)."""
    path = Path(path)
    state = read_torch_file(
        path,
        "scenario checkpoint",
        "`python -m clstm_ppo.scenarios train` writes DIR/<model>.pt",
        "train it again",
    )
    if isinstance(state, dict) and state.get("format") in AGENT_FORMATS:
        raise CheckpointError(
            f"{path} is an agent checkpoint (python -m clstm_ppo.train); pass a scenario "
            "generator's checkpoint (python -m clstm_ppo.scenarios train)"
        )
    if isinstance(state, dict) and state.get("format") == OLD_FORMAT:
        raise CheckpointError(
            f"{path} is a scenario checkpoint of the older format {OLD_FORMAT}; convert it once "
            f"with `python -m clstm_ppo.migrate {path} NEW.pt` and use NEW.pt"
        )
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} is not a scenario generator checkpoint (no '{FORMAT}' marker)"
        )
    try:
        return generator_from_state(state, path, device or torch.device("cpu"))
    except (CheckpointError, ConfigError):  # already one line saying what is wrong
        raise
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as err:
        # a field missing or mistyped
        raise CheckpointError(
            f"{path} is a damaged scenario checkpoint ({type(err).__name__}: "
            f"{first_line(err, 100)}); train it again"
        ) from None


def generator_from_state(
    state: dict[str, Any], path: Path, device: torch.device
) -> FittedGenerator:
    """The generator a checkpoint's loaded dict describes (``FittedGenerator.state``'s)."""
    names = _check_feature_set(state, path)
    if state.get("kind") not in MODELS:
        raise CheckpointError(
            f"{path} holds a model of unknown kind {state.get('kind')!r}; "
            f"this version knows {', '.join(MODELS)}"
        )
    transform = Transform.from_state_dict(state["transform"])
    model = build_model(state["kind"], len(names), transform.n_cond, state["settings"], device)
    model.load_state_dict(state["model"])
    if hasattr(model, "total_steps"):
        model.total_steps = max(int(state["total_steps"]), 1)
    rule = None if state["regimes"] is None else RegimeRule.from_state_dict(state["regimes"])
    return FittedGenerator(
        kind=state["kind"],
        model=model,
        feature_names=names,
        transform=transform,
        seq_len=int(state["seq_len"]),
        start=dict(state["start"]),
        data=dict(state["data"]),
        regimes=rule,
        step=int(state["step"]),
        total_steps=int(state["total_steps"]),
        extra=dict(state["extra"]),
        calibration=Calibration.from_state_dict(state["calibration"]),
    )
