"""Settings: every value outside what it may be is refused in one line that names the key and the rule."""
import dataclasses
import functools
import shlex
import subprocess
import typing
import warnings
from pathlib import Path

import pytest

from clstm_ppo.agent.precision import PRECISIONS
from clstm_ppo.config import (
    ADDED,
    CHOICES,
    LIMITS,
    AgentConfig,
    Config,
    ConfigError,
    CostConfig,
    LaunchConfig,
    MarketConfig,
    OutputConfig,
    PPOConfig,
    TrainConfig,
    check_values,
    load_config,
    named_configs,
    parse_override,
    to_dict,
    walk_rules,
)
from clstm_ppo.config.fields import RENAMED, SavedAs
from clstm_ppo.train import build_parser, resolve_config


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
    for name in ("default", "smoke", "paper", "planted", "contracts"):
        load_config(name)
    load_config()


@pytest.mark.parametrize(("override", "message"), [
    ("env.max_positions=0", "env.max_positions must be >= 1, got 0"),
    ("market.strike_step=-1", "market.strike_step must be >= 0, got -1.0"),
    ("market.moneyness=[0.95, 0, 1.05]", "market.moneyness must be > 0, got [0.95, 0.0, 1.05]"),
    ("ppo.gamma=1.5", "ppo.gamma must be in [0, 1], got 1.5"),
    ("env.position_frac=0", "env.position_frac must be in (0, 1], got 0.0"),
    ("env.dsr_rate=1", "env.dsr_rate must be in (0, 1), got 1.0"),
    ("env.dsr_rate=-0.01", "env.dsr_rate must be in (0, 1), got -0.01"),
    ("env.dsr_prior_vol=0", "env.dsr_prior_vol must be in [0.0001, 1], got 0.0"),
    ("env.reward=sharpe", "env.reward is 'sharpe'; choose one of equity, excess, dsr"),
    ("market.costs.max_slippage=1", "market.costs.max_slippage must be in [0, 1), got 1.0"),
    ("train.num_envs=0", "train.num_envs must be >= 1, got 0"),
    ("ppo.target_kl=0", "ppo.target_kl must be > 0, got 0.0"),
    ("launch.precision=fp8", "launch.precision is 'fp8'; choose one of fp32, bf16, fp16"),
    ("env.dtype=float16", "env.dtype is 'float16'; choose one of float32, float64"),
    ("market.min_iv=2.5", "market.min_iv (2.5) must be below market.max_iv (2.0)"),
    ("market.expiries_days=[]", "market.moneyness and market.expiries_days need at least one entry"),
    ("market.costs.spread_min=0.2", "spread_min (0.2) must not exceed spread_max (0.1)"),
    ("market.costs.index_ticks=[0.05]", "market.costs.index_ticks and market.costs.stock_ticks need two increments"),
    ("market.costs.stock_ticks=[-0.01, 0.05]", "market.costs.stock_ticks must be >= 0, got [-0.01, 0.05]"),
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
    assert set(CHOICES["launch.precision"]) == set(PRECISIONS)


# ---------------------------------------------------------------- one source of truth, from any folder

ROOT = Path(__file__).resolve().parents[1]


def make_run_arguments() -> list[str]:
    """The arguments `make run` passes to the trainer, read from the Makefile's recipe."""
    recipe = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    line = next(row for row in recipe.splitlines() if "clstm_ppo.train" in row)
    return shlex.split(line.split("clstm_ppo.train", 1)[1])


def test_no_flags_resolve_the_same_settings_as_make_run_from_any_folder(tmp_path, monkeypatch):
    make_run = resolve_config(build_parser().parse_args(make_run_arguments()))
    monkeypatch.chdir(tmp_path)  # nothing here: no configs/ folder, no repository
    bare = resolve_config(build_parser().parse_args([]))
    assert to_dict(bare) == to_dict(make_run) == to_dict(Config())
    assert (bare.train.num_envs, bare.train.total_steps, bare.data.source) == (32, 200_000, "sp500")


def test_named_configs_ship_inside_the_package_and_a_path_still_works(tmp_path, monkeypatch):
    assert {"default", "smoke", "paper"} <= set(named_configs())
    monkeypatch.chdir(tmp_path)
    assert load_config("smoke").data.source == "synthetic"
    assert load_config("paper").agent.lstm2_hidden == 512
    (tmp_path / "mine.yaml").write_text("agent:\n  lstm1_hidden: 8\n")
    assert load_config("mine.yaml").agent.lstm1_hidden == 8
    with pytest.raises(ConfigError, match="'nosuch' is neither a file nor a named config; name one of"):
        load_config("nosuch")


@pytest.mark.parametrize("source", ["yaml", "set", "flag", "constructor", "assignment"])
def test_an_out_of_range_value_is_refused_whatever_its_source(source, tmp_path):
    message = "config: train.num_envs must be >= 1, got 0"
    with pytest.raises(ConfigError) as err:
        if source == "yaml":
            (tmp_path / "bad.yaml").write_text("train:\n  num_envs: 0\n")
            load_config(tmp_path / "bad.yaml")
        elif source == "set":
            load_config(overrides=["train.num_envs=0"])
        elif source == "flag":
            resolve_config(build_parser().parse_args(["--num-envs", "0"]))
        elif source == "constructor":
            TrainConfig(num_envs=0)
        else:
            Config().train.num_envs = 0
    assert str(err.value) == message


def test_a_config_built_in_code_is_typed_and_its_settings_checked_together():
    with pytest.raises(ConfigError, match="config: ppo.learning_rate must be float, got 'fast'"):
        PPOConfig(learning_rate="fast")
    with pytest.raises(ConfigError, match="unknown key 'agent.lstm3_hidden'"):
        AgentConfig().lstm3_hidden = 4
    assert CostConfig(spread_base=0).spread_base == 0.0 and isinstance(CostConfig(spread_base=0).spread_base, float)
    with pytest.raises(ConfigError, match=r"train.num_envs \(6\) must be a multiple of ppo.num_minibatches"):
        Config(train=TrainConfig(num_envs=6))
    with pytest.raises(ConfigError, match="launch.cuda_graphs: on replays the compiled rollout decision; set launch"):
        Config(launch=LaunchConfig(compile_loop="off", cuda_graphs="on"))
    with pytest.raises(ConfigError, match="launch.compile_loop"):
        LaunchConfig(compile_loop="yes")
    # YAML reads --set launch.compile_loop=off as False: an on/off setting takes it as the word it was
    assert (parse_override("launch.compile_loop=off")["launch"]["compile_loop"],
            LaunchConfig(compile_loop=False).compile_loop) == (False, "off")
    assert LaunchConfig(cuda_graphs=True).cuda_graphs == "on"
    for broken, message in (({"launch": LaunchConfig(update_graphs=True, cuda_graphs="off")},
                             "needs launch.cuda_graphs"),
                            ({"launch": LaunchConfig(compile_loop="off", update_graphs=True)},
                             "launch.compile_loop auto or on"),
                            ({"ppo": PPOConfig(grad_accumulation=2), "launch": LaunchConfig(update_graphs=True)},
                             r"needs ppo.grad_accumulation 1 \(got 2\)"),
                            ({"launch": LaunchConfig(update_graphs=True, precision="fp16")}, "fp32 or bf16")):
        with pytest.raises(ConfigError, match=f"config: launch.update_graphs .*{message}"):
            Config(**broken)
    assert Config(launch=LaunchConfig(update_graphs=True, precision="bf16")).launch.update_graphs
    with pytest.raises(ConfigError, match="output.run_name must be str, got True"):
        OutputConfig(run_name=True)  # free text is not guessed
    cfg = Config()
    cfg.market.moneyness.append(-1.0)  # a list changed in place escapes the assignment check ...
    with pytest.raises(ConfigError, match="market.moneyness must be > 0"):
        check_values(cfg)  # ... and is caught where a run starts


def test_every_setting_has_help_and_flags_take_theirs_from_the_field():
    rules = list(walk_rules(Config))
    assert all(rule.help.strip() for _, _, rule in rules), [k for k, _, r in rules if not r.help.strip()]
    help_text = " ".join(build_parser().format_help().split())
    for key, _, rule in rules:
        if rule.flag:
            assert rule.flag in help_text and f"({key})" in help_text


def test_settings_saved_before_a_key_existed_keep_what_the_run_did(tmp_path):
    """A checkpoint saved before market.iv_call_skew existed ran on one skew for both wings: resumed, walked or
    predicted from, it keeps that surface; a user's file without the key takes today's default."""
    saved = to_dict(Config())
    del saved["market"]["iv_call_skew"]
    saved["market"]["iv_skew"] = 0.7
    assert load_config(None, [], base=saved).market.iv_call_skew == 0.7
    assert load_config(None, ["market.iv_call_skew=0.3"], base=saved).market.iv_call_skew == 0.3  # a flag wins
    newer = to_dict(Config())
    newer["market"]["iv_call_skew"] = 0.2
    assert load_config(None, [], base=newer).market.iv_call_skew == 0.2  # saved with the key: kept as saved
    file = tmp_path / "mine.yaml"
    file.write_text("market:\n  iv_skew: 0.7\n")
    assert load_config(file).market.iv_call_skew == MarketConfig().iv_call_skew
    for added, stands_for in ADDED.items():
        keys = [added, stands_for.key] if isinstance(stands_for, SavedAs) else [added]
        for key in keys:
            assert functools.reduce(getattr, key.split("."), Config()) is not None, f"{key} is not a setting"


def test_a_checkpoint_saved_before_the_action_modes_is_a_contracts_agent_paid_per_bar():
    """The default agent scales one rule and is paid by position; a run saved before either setting existed chose
    the chain's orders and was paid per bar, and resumes, walks and predicts so. A saved run keeps its own."""
    fresh = Config()
    assert (fresh.agent.actions, fresh.ppo.credit, fresh.pretrain.enabled, fresh.prior.kl) == ("scale", "position",
                                                                                              False, 0.0)
    saved = to_dict(Config())
    del saved["agent"]["actions"], saved["ppo"]["credit"]
    old = load_config(None, [], base=saved)
    assert (old.agent.actions, old.ppo.credit) == ("contracts", "bar")
    kept = to_dict(Config())  # saved since: what it says
    assert (load_config(None, [], base=kept).agent.actions, load_config(None, [], base=kept).ppo.credit) == (
        "scale", "position")
    earlier = load_config("contracts")  # the default run before the change, by name
    assert (earlier.agent.actions, earlier.ppo.credit, earlier.pretrain.enabled, earlier.prior.kl) == (
        "contracts", "bar", True, 0.5)


def test_a_renamed_key_is_read_as_its_new_name_with_one_line_from_a_file_or_flag_and_quietly_from_a_checkpoint(
        tmp_path):
    """env.compile became launch.compile_loop and train.compile launch.compile_encoder (they compile what the names
    say): an old file, flag or checkpoint still means what it meant."""
    file = tmp_path / "old.yaml"
    file.write_text("env:\n  compile: on\ntrain:\n  compile: true\n")
    with pytest.warns(FutureWarning) as said:
        cfg = load_config(file, ["env.compile=off"])
    assert (cfg.launch.compile_loop, cfg.launch.compile_encoder) == ("off", True)
    lines = [str(w.message) for w in said]
    assert len(lines) == 3 and all("\n" not in line for line in lines)
    assert f"{file}: env.compile is now named launch.compile_loop; read as launch.compile_loop" in lines
    assert "--set env.compile=off: env.compile is now named launch.compile_loop; read as launch.compile_loop" in lines
    saved = to_dict(Config())
    del saved["launch"]["compile_loop"], saved["launch"]["compile_encoder"]
    saved["env"]["compile"], saved["train"]["compile"] = "on", True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old = load_config(None, [], base=saved)
    assert (old.launch.compile_loop, old.launch.compile_encoder) == ("on", True)
    with pytest.raises(ConfigError, match="env.compile and launch.compile_loop are one setting"):
        load_config(_yaml(tmp_path, "env:\n  compile: on\nlaunch:\n  compile_loop: off\n"))
    with pytest.raises(ConfigError, match="unknown key 'env.compile_loop'"):
        load_config(None, ["env.compile_loop=on"])


def _yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "both.yaml"
    path.write_text(text)
    return path


def test_train_settings_split_by_purpose_and_old_train_keys_still_mean_what_they_meant(tmp_path):
    """train.* held launch, budget, pretraining, prior and output settings; each moved to its section. A file or flag
    with an old key says the new one in one line; a checkpoint saved in the old layout loads quietly, unchanged."""
    moved = {old: new for old, new in RENAMED.items() if old.startswith("train.") and old != "train.compile"}
    assert len(moved) == 33 and all(new.split(".")[0] in {"launch", "pretrain", "prior", "output"}
                                    for new in moved.values())
    for new in moved.values():  # every new key is a setting, and train keeps only the budget's
        assert functools.reduce(getattr, new.split("."), Config()) is not None
    assert {f.name for f in dataclasses.fields(TrainConfig)} == {
        "num_envs", "total_steps", "num_episodes", "eval_every", "selection_window", "early_stopping_patience"}
    file = tmp_path / "old.yaml"
    file.write_text("train:\n  prior_kl: 0.25\n  threads_per_worker: 1\n  num_envs: 8\n")
    with pytest.warns(FutureWarning) as said:
        cfg = load_config(file, ["train.pretraining=false", "train.run_name=mine", "train.prior_kl=0"])
    lines = [str(w.message) for w in said]
    assert len(lines) == 5 and all("\n" not in line for line in lines)
    assert f"{file}: train.prior_kl is now named prior.kl; read as prior.kl" in lines
    assert "--set train.pretraining=false: train.pretraining is now named pretrain.enabled; read as " \
           "pretrain.enabled" in lines
    assert (cfg.prior.kl, cfg.launch.threads_per_worker, cfg.train.num_envs, cfg.pretrain.enabled,
            cfg.output.run_name) == (0.0, 1, 8, False, "mine")
    current = Config(launch=LaunchConfig(threads_per_worker=3), output=OutputConfig(keep_last=7))
    old_layout = to_dict(current)
    for old, new in moved.items():  # the same settings as a run saved them before the split
        section, key = new.split(".")
        old_layout["train"][old.split(".")[1]] = old_layout[section].pop(key)
    for section in ("launch", "pretrain", "prior", "output"):
        assert not old_layout.pop(section)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_config(None, [], base=old_layout) == current
    with pytest.raises(ConfigError, match="train.prior_kl and prior.kl are one setting"):
        load_config(_yaml(tmp_path, "train:\n  prior_kl: 0.1\nprior:\n  kl: 0.2\n"))


def test_runs_saved_before_the_tick_grid_keep_quoting_off_it():
    """Checkpoints saved before the quote grid existed resume and walk without it; new runs get it."""
    saved = to_dict(Config())
    for key in ("index_ticks", "stock_ticks"):
        del saved["market"]["costs"][key]
    old = load_config(None, [], base=saved).market.costs
    assert old.index_ticks == [0.0, 0.0] and old.stock_ticks == [0.0, 0.0]
    assert load_config(None, [], base=to_dict(Config())).market.costs.index_ticks == [0.05, 0.10]
    assert load_config(None, []).market.costs.stock_ticks == [0.01, 0.05]
