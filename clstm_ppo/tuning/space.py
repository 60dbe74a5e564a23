"""The search space: a YAML file mapping settings (dotted keys, as ``--set`` writes them) to
distributions, checked against the settings registry before any trial runs, so a typo costs one
line, not a study."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from clstm_ppo.config import Config, ConfigError, first_line, load_config, walk_rules

# The tuner sets these itself for every trial (seed sweeps, budget, where runs go): a space may not.
TUNER_OWNED = (
    "seed",
    "train.total_steps",
    "train.num_episodes",
    "output.checkpoint_dir",
    "output.run_name",
    "launch.threads_per_worker",
    "data.source",
)
KINDS = ("float", "int", "categorical")


@dataclass(frozen=True)
class Param:
    """One tunable setting and its distribution."""

    key: str
    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: Any) -> Any:
        """The value an Optuna trial draws for this setting."""
        if self.kind == "categorical":
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(
                self.key, int(self.low), int(self.high), step=int(self.step or 1), log=self.log
            )
        return trial.suggest_float(self.key, self.low, self.high, step=self.step, log=self.log)

    def candidates(self) -> list[Any]:
        """The values that bound what this parameter can draw: checking them checks
        every draw's range."""
        if self.kind == "categorical":
            return list(self.choices)
        return [int(self.low), int(self.high)] if self.kind == "int" else [self.low, self.high]


def default_space_path() -> Path:
    return Path(str(resources.files("clstm_ppo.tuning") / "default_space.yaml"))


def settable_types() -> dict[str, Any]:
    """Dotted key -> annotation of every leaf setting."""
    return {key: tp for key, tp, _ in walk_rules(Config)}


def _number(origin: str, key: str, name: str, value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value)  # PyYAML reads 1e-4 (no dot) as text
        except ValueError:
            pass
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ConfigError(f"{origin}: {key}: {name} must be a number, got {value!r}")
    return float(value)


def parse_param(origin: str, key: str, spec: Any, types: dict[str, Any]) -> Param:
    """One entry of the space, or a one-line error naming the file, the key and what is wrong."""
    if key not in types:
        close = difflib.get_close_matches(key, list(types), n=1)
        hint = (
            f" (did you mean {close[0]}?)" if close else "; see the Settings section of the README"
        )
        raise ConfigError(f"{origin}: '{key}' is not a setting{hint}")
    if key in TUNER_OWNED:
        raise ConfigError(
            f"{origin}: '{key}' is set by the tuner itself (--seeds, --steps, --data, --out); "
            "drop it from the space"
        )
    tp = types[key]
    if not isinstance(spec, dict):
        raise ConfigError(
            f"{origin}: {key} must map to a distribution such as {{type: float, low: 1e-5, "
            f"high: 1e-3, log: true}} or {{type: categorical, choices: [...]}}, got {spec!r}"
        )
    kind = spec.get("type")
    if kind not in KINDS:
        raise ConfigError(f"{origin}: {key}: type must be one of {', '.join(KINDS)}, got {kind!r}")
    allowed = (
        {"type", "choices"} if kind == "categorical" else {"type", "low", "high", "log", "step"}
    )
    extra = sorted(set(spec) - allowed)
    if extra:
        raise ConfigError(
            f"{origin}: {key}: unknown field(s) {', '.join(extra)}; a {kind} takes "
            f"{', '.join(sorted(allowed - {'type'}))}"
        )
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{origin}: {key}: choices must be a non-empty list")
        if any(not isinstance(c, (bool, int, float, str)) for c in choices):
            raise ConfigError(
                f"{origin}: {key}: each choice must be a number, a string or a boolean"
            )
        return Param(key, kind, choices=tuple(choices))
    if tp not in (int, float):
        raise ConfigError(
            f"{origin}: {key} is not a number setting; give it type: categorical with choices"
        )
    if kind == "float" and tp is int:
        raise ConfigError(f"{origin}: {key} is a whole-number setting; give it type: int")
    if "low" not in spec or "high" not in spec:
        raise ConfigError(f"{origin}: {key}: a {kind} needs low and high")
    low, high = (_number(origin, key, name, spec[name]) for name in ("low", "high"))
    log = spec.get("log", False)
    step = None if spec.get("step") is None else _number(origin, key, "step", spec["step"])
    if not isinstance(log, bool):
        raise ConfigError(f"{origin}: {key}: log must be true or false, got {log!r}")
    if low >= high:
        raise ConfigError(f"{origin}: {key}: low ({low:g}) must be below high ({high:g})")
    if log and low <= 0:
        raise ConfigError(f"{origin}: {key}: a log scale needs low > 0, got {low:g}")
    if step is not None and (step <= 0 or (log and kind == "float")):
        raise ConfigError(
            f"{origin}: {key}: step must be > 0 and cannot go with a float's log scale"
        )
    if kind == "int" and any(v != int(v) for v in (low, high, step or 1)):
        raise ConfigError(f"{origin}: {key}: an int's low, high and step must be whole numbers")
    return Param(key, kind, low, high, log, step)


def load_space(
    path: str | Path | None, config: str | None = None, overrides: list[str] | None = None
) -> list[Param]:
    """The space in ``path`` (None: the default), each bound checked against the setting's
    rule on top of ``config`` and ``overrides`` (so a window the data cannot hold fails
    here, not in trial 7)."""
    path = Path(path) if path is not None else default_space_path()
    origin = f"space {path}"
    try:
        loaded = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(f"{origin}: cannot read it ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{origin} is not valid YAML: {first_line(err)}") from None
    if (
        not isinstance(loaded, dict)
        or set(loaded) != {"params"}
        or not isinstance(loaded["params"], dict)
        or not loaded["params"]
    ):
        raise ConfigError(
            f"{origin} must hold one mapping, params:, of settings to distributions "
            f"(see {default_space_path().name} in the package)"
        )
    types = settable_types()
    params = [parse_param(origin, str(key), spec, types) for key, spec in loaded["params"].items()]
    for param in params:
        for value in param.candidates():
            try:
                load_config(config, [*(overrides or []), f"{param.key}={value}"])
            except ConfigError as err:
                raise ConfigError(f"{origin}: {param.key}={value!r} is refused: {err}") from None
    return params


def as_overrides(values: dict[str, Any]) -> list[str]:
    """A trial's drawn values as ``--set`` arguments (YAML text, so 1e-05 and true read
    back as they were)."""
    return [
        (
            f"{key}="
            f"{yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"
        )
        for key, value in values.items()
    ]
