"""Settings: every value outside what it may be is refused in one line that names the key and the rule."""
import dataclasses
import typing

import pytest

from clstm_ppo.agent.precision import PRECISIONS
from clstm_ppo.config import CHOICES, LIMITS, Config, ConfigError, load_config


def numeric_keys(cls=Config, prefix=""):
    """Every int/float (or list of them) setting, found by walking the dataclasses, not by reading LIMITS."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from numeric_keys(tp, f"{prefix}{f.name}.")
            continue
        args = set(typing.get_args(tp)) | {tp}
        if args & {int, float, list[int], list[float]} and f.name not in ("seed",):
            yield prefix + f.name


def test_every_numeric_setting_outside_synthetic_market_has_a_rule():
    keys = {k for k in numeric_keys() if not k.startswith("data.synthetic.")}  # the generator checks its own
    assert keys - set(LIMITS) == set()
    assert set(LIMITS) - keys == set(), "a rule for a setting that does not exist"


def test_every_default_and_shipped_config_obeys_the_rules():
    for name in ("default", "smoke", "paper"):
        load_config(f"configs/{name}.yaml")
    load_config()


@pytest.mark.parametrize(("override", "message"), [
    ("env.max_positions=0", "env.max_positions must be >= 1, got 0"),
    ("market.strike_step=-1", "market.strike_step must be >= 0, got -1.0"),
    ("market.moneyness=[0.95, 0, 1.05]", "market.moneyness must be > 0, got [0.95, 0.0, 1.05]"),
    ("ppo.gamma=1.5", "ppo.gamma must be in [0, 1], got 1.5"),
    ("env.position_frac=0", "env.position_frac must be in (0, 1], got 0.0"),
    ("market.costs.max_slippage=1", "market.costs.max_slippage must be in [0, 1), got 1.0"),
    ("train.num_envs=0", "train.num_envs must be >= 1, got 0"),
    ("ppo.target_kl=0", "ppo.target_kl must be > 0, got 0.0"),
    ("train.precision=fp8", "train.precision is 'fp8'; choose one of fp32, bf16, fp16"),
    ("env.dtype=float16", "env.dtype is 'float16'; choose one of float32, float64"),
    ("market.min_iv=2.5", "market.min_iv (2.5) must be below market.max_iv (2.0)"),
    ("market.expiries_days=[]", "market.moneyness and market.expiries_days need at least one entry"),
    ("market.costs.spread_min=0.2", "spread_min (0.2) must not exceed spread_max (0.1)"),
    ("data.val_frac=0.3", "data.train_frac + data.val_frac (0.7 + 0.3) must leave a test split"),
    ("ppo.adam_betas=[0.9]", "ppo.adam_betas needs two entries"),
    ("train.num_envs=6", "train.num_envs (6) must be a multiple of ppo.num_minibatches (4)"),
    ("ppo.grad_accumulation=3", "ppo.grad_accumulation (3) must divide ppo.num_minibatches (4)"),
    ("train.total_steps=0", "train.total_steps must be at least 1 (or set train.num_episodes)"),
])
def test_out_of_range_settings_are_one_line_errors(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=[override])
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("config: ")


def test_edges_that_are_allowed():
    cfg = load_config(overrides=["ppo.gamma=1", "env.position_frac=1", "market.strike_step=0", "ppo.target_kl=null",
                                 "train.total_steps=0", "train.num_episodes=10", "env.ruin_fraction=0"])
    assert cfg.ppo.gamma == 1.0 and cfg.ppo.target_kl is None and cfg.train.num_episodes == 10


def test_choices_match_what_the_code_accepts():
    assert set(CHOICES["train.precision"]) == set(PRECISIONS)
