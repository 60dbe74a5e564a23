"""A run's settings: the dataclass defaults (or a checkpoint's), then a named config or YAML file,
then repeated ``--set section.key=value`` overrides, in that order."""

from __future__ import annotations

import dataclasses
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from clstm_ppo.config.fields import (
    ADDED,
    OBSOLETE,
    RENAMED,
    ConfigError,
    SavedAs,
    first_line,
    from_dict,
)
from clstm_ppo.config.sections import Config


def named_configs() -> list[str]:
    """The configs shipped inside the package, chosen by name (``--config smoke``)."""
    folder = resources.files("clstm_ppo.config") / "named"
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


def config_text(name_or_path: str | Path) -> tuple[str, str]:
    """(YAML text, where it came from) of a named config or a file; a file wins when both exist."""
    path = Path(name_or_path)
    if path.is_file():
        return path.read_text(), str(path)
    name = str(name_or_path)
    if name in named_configs():
        return (
            resources.files("clstm_ppo.config") / "named" / f"{name}.yaml"
        ).read_text(), f"config '{name}'"
    raise ConfigError(
        f"config {name!r} is neither a file nor a named config; name one of "
        f"{', '.join(named_configs())} or pass an existing YAML file to --config"
    )


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def without_obsolete(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``values`` (nested) without the keys in OBSOLETE: for settings saved by an older version."""
    return {
        k: without_obsolete(v, f"{prefix}{k}.") if isinstance(v, dict) else v
        for k, v in values.items()
        if f"{prefix}{k}" not in OBSOLETE
    }


def with_new_names(values: dict[str, Any], origin: str | None) -> dict[str, Any]:
    """``values`` (nested) with each key of RENAMED under its new name; ``origin`` (the file or
    ``--set``) gets one warning line a renamed key, None (a checkpoint's settings) none. Both names
    in one source: ConfigError."""
    for old, new in RENAMED.items():
        path, _, key = old.rpartition(".")
        section = _get(values, path)
        if not isinstance(section, dict) or key not in section:
            continue
        new_path, _, new_key = new.rpartition(".")
        if new_key in (_get(values, new_path) or {}):
            raise ConfigError(
                f"{origin or 'config'}: {old} and {new} are one setting, now "
                f"named {new}; drop {old}"
            )
        if origin is not None:
            warnings.warn(
                f"{origin}: {old} is now named {new}; read as {new}", FutureWarning, stacklevel=3
            )
        values = merge(_without(values, old), nested(new, section[key]))
    return values


def _without(values: dict[str, Any], dotted: str) -> dict[str, Any]:
    head, _, rest = dotted.partition(".")
    if not rest:
        return {k: v for k, v in values.items() if k != head}
    return {**values, head: _without(values[head], rest)}


def as_saved(values: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's saved settings as this version reads them: renamed keys under their new names,
    obsolete keys dropped, and each key of ADDED that they lack (where they have its section) set to
    what it stands for, so an older run resumes and walks as it ran."""
    values = without_obsolete(with_new_names(values, None))
    for added, stands_for in ADDED.items():
        old = _get(values, stands_for.key) if isinstance(stands_for, SavedAs) else stands_for
        path, _, key = added.rpartition(".")
        section = _get(values, path)
        if isinstance(section, dict) and key not in section and old is not None:
            values = merge(values, nested(added, old))
    return values


def current_key(dotted: str) -> str:
    """The name a setting's key has now (``train.prior_kl`` -> ``prior.kl``): rows record
    the runs' own keys."""
    return RENAMED.get(dotted, dotted)


def with_defaults_at(saved: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """A checkpoint's saved settings as this version reads them (``as_saved``) with the dotted
    ``keys`` set back to their defaults: what a file must not choose for the command reading it
    (where it writes, where it runs)."""
    defaults = to_dict(Config())
    values = as_saved(saved)
    for key in keys:
        values = merge(values, nested(key, _get(defaults, key)))
    return values


def _get(values: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        values = values.get(part) if isinstance(values, dict) else None
    return values


def merge(base: dict[str, Any], update: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``update`` laid over ``base``, key by key; a section (a mapping) is never replaced by a
    single value, which would drop every setting it held for the defaults."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(out.get(key), dict) and not isinstance(value, dict):
            raise ConfigError(
                f"config: '{prefix}{key}' is a section of settings, not one value (got {value!r}); "
                f"set its keys instead, e.g. --set {prefix}{key}.<key>=VALUE"
            )
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value, f"{prefix}{key}.")
        else:
            out[key] = value
    return out


def nested(dotted: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``"a.b"``."""
    for part in reversed(dotted.split(".")):
        value = {part: value}
    return value


def parse_override(text: str) -> dict[str, Any]:
    """``section.key=value`` as a nested dict; the value is read as YAML (3 -> int, 0.5 ->
    float, [1,2] -> list)."""
    if "=" not in text:
        raise ConfigError(
            f"--set {text!r}: write it as section.key=value, e.g. --set data.window=20"
        )
    dotted, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        # a ParserError, or a ConstructorError for a tag such as !!python/object
        raise ConfigError(
            f"--set {text!r}: the value is not plain YAML ({first_line(err, 80)}); quote it as "
            "text or write it as YAML, e.g. --set data.window=20 or --set data.symbols=[SPY,QQQ]"
        ) from None
    return nested(dotted.strip(), value)


def load_config(
    config: str | Path | None = None,
    overrides: list[str] | None = None,
    base: dict[str, Any] | None = None,
    flags: dict[str, Any] | None = None,
) -> Config:
    """Defaults (or ``base``, e.g. a checkpoint's settings), then the named config or YAML file
    ``config``, then ``--set`` overrides, then ``flags`` (dotted key -> value, already typed by
    the command line)."""
    values = merge(to_dict(Config()), as_saved(base or {}))
    if config is not None:
        text, origin = config_text(config)
        try:
            loaded = yaml.safe_load(text) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{origin} is not valid YAML: {first_line(err)}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(
                f"{origin} must hold a mapping of sections, not {type(loaded).__name__}"
            )
        values = merge(values, with_new_names(loaded, origin))
    for text in overrides or []:
        values = merge(values, with_new_names(parse_override(text), f"--set {text}"))
    for dotted, value in (flags or {}).items():
        values = merge(values, nested(dotted, value))
    return from_dict(Config, values)


def save_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
