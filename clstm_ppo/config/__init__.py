"""Typed configuration: the one source of truth for every setting (``sections.py``, with the
market's in ``market_settings.py``, the run's own in ``train_settings.py`` and the generated
markets' in ``generated_markets.py``), how a setting
is declared and checked (``fields.py``), the rules between settings (``consistency.py``), and how a
run's settings are put together from defaults, a named config or file, and overrides
(``resolve.py``)."""

from __future__ import annotations

from types import MappingProxyType

from clstm_ppo.config.consistency import check_values
from clstm_ppo.config.fields import ADDED, OBSOLETE, ConfigError, first_line, from_dict, walk_rules
from clstm_ppo.config.generated_markets import PlantedConfig, SyntheticConfig
from clstm_ppo.config.market_settings import CostConfig, MarketConfig
from clstm_ppo.config.resolve import (
    config_text,
    current_key,
    load_config,
    merge,
    named_configs,
    parse_override,
    save_config,
    to_dict,
    with_defaults_at,
    without_obsolete,
)
from clstm_ppo.config.sections import AgentConfig, Config, DataConfig, EnvConfig, PPOConfig
from clstm_ppo.config.train_settings import (
    RULE_PRIOR,
    WITHOUT_RULE_PRIOR,
    LaunchConfig,
    OutputConfig,
    PretrainConfig,
    PriorConfig,
    TrainConfig,
)

# Read-only views of the rules, derived from the fields (kept for the
# code and tests that look them up).
CHOICES = MappingProxyType({k: r.choices for k, _, r in walk_rules(Config) if r.choices})
LIMITS = MappingProxyType({k: r.limits for k, _, r in walk_rules(Config) if r.limits})

__all__ = [
    "ADDED",
    "CHOICES",
    "LIMITS",
    "OBSOLETE",
    "AgentConfig",
    "Config",
    "ConfigError",
    "CostConfig",
    "DataConfig",
    "EnvConfig",
    "LaunchConfig",
    "MarketConfig",
    "OutputConfig",
    "PlantedConfig",
    "PPOConfig",
    "PretrainConfig",
    "PriorConfig",
    "SyntheticConfig",
    "TrainConfig",
    "check_values",
    "config_text",
    "current_key",
    "first_line",
    "from_dict",
    "load_config",
    "merge",
    "named_configs",
    "parse_override",
    "save_config",
    "to_dict",
    "walk_rules",
    "with_defaults_at",
    "without_obsolete",
    "RULE_PRIOR",
    "WITHOUT_RULE_PRIOR",
]
