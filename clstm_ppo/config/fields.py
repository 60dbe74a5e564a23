"""How a setting is declared, once: its default, help, allowed values and (optionally)
its command-line flag.

``setting(...)`` puts all of that into the dataclass field's metadata; ``Section`` checks
every assignment against it, so a value is refused the same way whether it came from YAML,
``--set``, a flag or code.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar


class ConfigError(ValueError):
    """A configuration problem, phrased as one line a user can act on."""


def first_line(err: BaseException, limit: int = 160) -> str:
    """An exception's first non-empty line (or its type's name), to quote inside
    a one-line error."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return (lines[0] if lines else type(err).__name__)[:limit]


@dataclass(frozen=True)
class Rule:
    """What one setting may hold. ``limits`` reads as it does in the error: ">= 1", "(0,
    1]"; a list setting obeys it entry by entry. ``flag`` names the train command's flag
    that sets it, if any."""

    help: str
    limits: str | None = None
    choices: tuple[str, ...] | None = None
    flag: str | None = None

    def check(self, key: str, value: Any) -> None:
        # A setting with both (a word or a number, as data.periods_per_year: auto or 252) checks
        # words by its choices and numbers by its limits.
        if self.choices is not None and (self.limits is None or isinstance(value, str)):
            if value not in self.choices:
                number = f", or a number {self._interval()}" if self.limits else ""
                raise ConfigError(
                    f"config: {key} is {value!r}; choose one of {', '.join(self.choices)}{number}"
                )
            return
        if self.limits is None or value is None:
            return
        for v in value if isinstance(value, list) else [value]:
            if not obeys(v, self.limits):
                raise ConfigError(f"config: {key} must be {self._interval()}, got {value!r}")

    def _interval(self) -> str:
        """The limits as the error reads them: "in (0, 1]", ">= 1"."""
        return f"in {self.limits}" if self.limits[0] in "([" else self.limits


def setting(
    default: Any,
    help: str,
    *,
    limits: str | None = None,
    choices: tuple[str, ...] | None = None,
    flag: str | None = None,
) -> Any:
    """A dataclass field with its rule; a list default is copied for every instance."""
    meta = {"rule": Rule(help, limits, choices, flag)}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, help: str) -> Any:
    """A field holding a nested section (built with its own defaults)."""
    return field(default_factory=cls, metadata={"rule": Rule(help)})


def obeys(value: float, rule: str) -> bool:
    if rule[0] in "([":  # an interval such as (0, 1]
        low, high = (float(x) for x in rule[1:-1].split(","))
        above = value > low if rule[0] == "(" else value >= low
        return above and (value < high if rule[-1] == ")" else value <= high)
    op, bound = rule.split()
    return value > float(bound) if op == ">" else value >= float(bound)


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """Each field's resolved annotation (the class never changes, so this is read once)."""
    return typing.get_type_hints(cls)


def rule_of(cls: type, name: str) -> Rule | None:
    return next((f.metadata.get("rule") for f in dataclasses.fields(cls) if f.name == name), None)


class Section:
    """Base of every settings dataclass: each assignment (the constructor's included)
    is typed and checked.

    ``path`` is the section's dotted place in ``Config`` ("market.costs"), so an error names the key
    as a YAML file or ``--set`` would write it.
    """

    path: ClassVar[str] = ""

    def __setattr__(self, name: str, value: Any) -> None:
        types_ = field_types(type(self))
        key = f"{self.path}.{name}" if self.path else name
        if name not in types_:
            valid = ", ".join(f.name for f in dataclasses.fields(self))
            raise ConfigError(f"config: unknown key '{key}'; valid keys here: {valid}")
        rule = rule_of(type(self), name)
        if (
            isinstance(value, bool)
            and rule is not None
            and rule.choices
            and {"on", "off"} <= set(rule.choices)
        ):
            value = "on" if value else "off"  # YAML 1.1 reads on/off (and yes/no) as booleans
        value = coerce(value, types_[name], key)
        if rule is not None:
            rule.check(key, value)
        object.__setattr__(self, name, value)


def type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; ints widen to floats,
    nothing else is guessed."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, key)
            except ConfigError:
                pass
        raise ConfigError(f"config: {key} must be {type_name(tp)}, got {value!r}")
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config: {key} must be a list, got {value!r}")
        return [coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"config: {key} must be a mapping of settings, got {value!r}")
        return from_dict(tp, value)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):
        try:
            return float(value)  # PyYAML reads 1e-4 (no dot) as text; it is a number here
        except ValueError:
            pass
    if tp is bool and isinstance(value, bool):
        return value
    if tp in (int, str) and isinstance(value, tp) and not isinstance(value, bool):
        return value
    if tp is str and isinstance(value, datetime.date):
        return value.isoformat()  # YAML reads 2013-01-31 as a date; settings keep dates as text
    raise ConfigError(f"config: {key} must be {type_name(tp)}, got {value!r}")


# Settings that existed once: a checkpoint's saved settings drop them quietly; a
# user's file or flag is told why.
OBSOLETE = {
    "market.iv_premium": "implied vol now comes from the data's iv/vix column or the fitted model "
    "(market.iv_source, docs/MARKET.md)",
    "train.eval_episodes": "validation is now one continuous walk over the whole split",
}

# Settings that took a name saying what they do: a file or flag with the old key is read as the new
# one, with one line naming it; a checkpoint's saved settings are read so quietly.
RENAMED = {
    # it compiles the rollout's decisions and the update's loss too
    "env.compile": "launch.compile_loop",
    "train.compile": "launch.compile_encoder",  # it compiles the market encoder alone
    # train.* held launch, budget, pretraining, prior and output settings until
    # 2026-12-02: each has its section now
    "train.device": "launch.device",
    "train.threads_per_worker": "launch.threads_per_worker",
    "train.precision": "launch.precision",
    "train.compile_encoder": "launch.compile_encoder",
    "train.compile_loop": "launch.compile_loop",
    "train.cuda_graphs": "launch.cuda_graphs",
    "train.update_graphs": "launch.update_graphs",
    "train.ddp_bucket_cap_mb": "launch.ddp_bucket_cap_mb",
    "train.ddp_static_graph": "launch.ddp_static_graph",
    "train.ddp_gradient_as_bucket_view": "launch.ddp_gradient_as_bucket_view",
    "train.dist_timeout_s": "launch.dist_timeout_s",
    "train.ranks_per_gpu": "launch.ranks_per_gpu",
    "train.pretraining": "pretrain.enabled",
    "train.pretrain_method": "pretrain.method",
    "train.pretrain_epochs": "pretrain.epochs",
    "train.pretrain_batch_size": "pretrain.batch_size",
    "train.pretrain_lr": "pretrain.lr",
    "train.prior_rules": "prior.rules",
    "train.prior_rollouts": "prior.rollouts",
    "train.prior_epochs": "prior.epochs",
    "train.prior_lr": "prior.lr",
    "train.prior_smoothing": "prior.smoothing",
    "train.prior_accuracy": "prior.accuracy",
    "train.prior_kl": "prior.kl",
    "train.prior_kl_until": "prior.kl_until",
    "train.checkpoint_dir": "output.checkpoint_dir",
    "train.run_name": "output.run_name",
    "train.keep_last": "output.keep_last",
    "train.checkpoint_every": "output.checkpoint_every",
    "train.rank_state_every": "output.rank_state_every",
    "train.wandb": "output.wandb",
    "train.wandb_project": "output.wandb_project",
    "train.tensorboard": "output.tensorboard",
}


@dataclass(frozen=True)
class SavedAs:
    """An added setting's value in older runs: what that run saved under another key."""

    key: str


# Settings added since runs were saved, each with what reproduces what those runs did (a value, or
# the saved value of another setting): a checkpoint's settings without the key take it (a user's
# file without it takes the default).
ADDED: dict[str, Any] = {
    "market.iv_call_skew": SavedAs(
        "market.iv_skew"
    ),  # one skew served both wings of the surface before 2026-11-27
    "market.costs.index_ticks": [0.0, 0.0],  # quotes had no tick grid before 2026-11-27
    "market.costs.stock_ticks": [0.0, 0.0],
    "data.option_features": False,  # agents observed the bar features alone before 2026-11-28
    "prior.kl": 0.0,  # no run was pulled toward a rule before 2026-11-28
    # the planted markup stopped at 1 + premium = 0.05 before 2026-12-02
    "data.planted.premium_floor": -0.95,
    "agent.mlp_core_hidden": SavedAs(
        "agent.lstm2_hidden"
    ),  # the mlp kind took LSTM 2's width before 2026-12-02
    # every agent chose among the chain's orders, paid per bar, before 2026-12-02
    "agent.actions": "contracts",
    "ppo.credit": "bar",
}


def from_dict(cls: type, values: dict[str, Any]) -> Any:
    """Build section ``cls`` from a (possibly partial) nested dict; every value is
    checked as it is set."""
    names = [f.name for f in dataclasses.fields(cls)]
    for key in values:
        dotted = f"{cls.path}.{key}" if cls.path else key
        if dotted in OBSOLETE:
            raise ConfigError(f"config: '{dotted}' was removed: {OBSOLETE[dotted]}; drop it")
        if key not in names:
            raise ConfigError(
                f"config: unknown key '{dotted}'; valid keys here: {', '.join(names)}"
            )
    return cls(**values)


def walk_rules(cls: type, prefix: str = "") -> typing.Iterator[tuple[str, Any, Rule]]:
    """(dotted key, annotation, rule) of every leaf setting under section ``cls``."""
    for f in dataclasses.fields(cls):
        tp = field_types(cls)[f.name]
        if dataclasses.is_dataclass(tp):
            yield from walk_rules(tp, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, tp, f.metadata["rule"]
