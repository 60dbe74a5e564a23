"""Where a stress test's paths come from: a trained generator's checkpoint, or a baseline by name
(``fhs``, ``garch_t``, ``bootstrap``) fitted on the agent's own training split; and the line it
prints when that source fails the tail or regime goals (verdict.py, docs/SCENARIOS.md).

A baseline source answers what ``scenarios.market.sample_market_data`` and ``check_fits`` ask of a
generator: ``kind``, ``feature_names``, ``data`` (with the data settings it was fitted on),
``check_regime`` (baselines have no regimes) and ``sample_frame``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clstm_ppo.config import ConfigError, DataConfig
from clstm_ppo.config.fields import from_dict
from clstm_ppo.config.resolve import to_dict
from clstm_ppo.data.dataset import MarketData, build_market_data
from clstm_ppo.scenarios.bar_columns import paths_frame, reconstruct, start_state
from clstm_ppo.scenarios.baselines import Bootstrap, Fhs, GarchT
from clstm_ppo.scenarios.fit import data_identity, training_set
from clstm_ppo.scenarios.generator import FittedGenerator, load_generator
from clstm_ppo.scenarios.quality_report import held_out_features
from clstm_ppo.scenarios.recognise import regime_report
from clstm_ppo.scenarios.verdict import stress_warning

BASELINE_NAMES = ("fhs", "garch_t", "bootstrap")
# the report's defaults: the same numbers
REPORT_PATHS, REPORT_LENGTH, REPORT_REGIME_PATHS = 1000, 252, 200


def is_baseline(spec: str | Path) -> bool:
    """A baseline's name that is not also a file here."""
    return str(spec) in BASELINE_NAMES and not Path(spec).exists()


@dataclass
class BaselineSource:
    kind: str
    model: Any  # Fhs, GarchT or Bootstrap
    feature_names: tuple[str, ...]
    start: dict[str, Any]
    data: dict[str, Any]
    regimes: None = None
    regime_names: tuple[str, ...] = field(default=())

    def check_regime(self, regime: str | None) -> None:
        if regime is not None:
            raise ConfigError(
                f"--regime {regime!r}: the {self.kind} baseline has no regimes; drop --regime or "
                "pass a cgan checkpoint"
            )

    def sample_features(
        self, paths: int, length: int, regime: str | None = None, seed: int = 0, start: str = "end"
    ) -> np.ndarray:
        self.check_regime(regime)
        return self.model.sample_features(paths, length, None, seed, start=start)

    def sample_frame(
        self,
        paths: int,
        length: int,
        regime: str | None = None,
        seed: int = 0,
        start: dict[str, Any] | None = None,
        first_date: str | None = None,
    ) -> pd.DataFrame:
        start = start or self.start
        prices = reconstruct(
            self.sample_features(paths, length, regime, seed), self.feature_names, start
        )
        return paths_frame(prices, start, first_date)


def fit_baseline(
    name: str, data: MarketData, data_config: DataConfig, window: int = 20
) -> BaselineSource:
    """Baseline ``name`` fitted on ``data``'s training split (built from ``data_config``)."""
    ts = training_set(data, window)
    ret = ts.names.index("ret")
    model = {
        "fhs": lambda: Fhs.fit(ts.raw, ts.names, window),
        "garch_t": lambda: GarchT.fit(ts.raw, ret),
        "bootstrap": lambda: Bootstrap.fit(ts.raw, ret),
    }[name]()
    return BaselineSource(
        name,
        model,
        ts.names,
        start_state(data),
        {**data_identity(data), "config": to_dict(data_config)},
    )


def scenario_source(spec: str | Path) -> FittedGenerator | str:
    """A generator checkpoint loaded, or a baseline's name (fitted later, on the agent's data)."""
    return str(spec) if is_baseline(spec) else load_generator(spec)


def goals_warning(source: FittedGenerator | BaselineSource, label: str) -> str | None:
    """verdict.stress_warning for ``source`` on the data it was fitted on, measured as the report
    measures it with its default paths, length and seed (so the numbers are the report's)."""
    data = build_market_data(from_dict(DataConfig, source.data["config"]))
    window = source.regimes.window if source.regimes is not None else 20
    ts = training_set(data, window)
    ret = ts.names.index("ret")
    held = held_out_features(data, ts.names)[..., ret]
    reference = None if source.kind == "garch_t" else GarchT.fit(ts.raw, ret)
    regimes = (
        regime_report(
            source,
            ts,
            held,
            REPORT_REGIME_PATHS,
            REPORT_LENGTH,
            0,
            data.periods_per_year,
            start="regime",
        )
        if source.regimes is not None
        else None
    )
    return stress_warning(
        source, label, ret, held, reference, regimes, REPORT_PATHS, REPORT_LENGTH, 0
    )
