"""Typed configuration: the one source of truth for every setting.

A run's settings come from the dataclass defaults, then a YAML file, then
repeated ``--set section.key=value`` overrides, in that order. Unknown keys and
values of the wrong type are errors that name the key and the valid choices.
"""
from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration problem, phrased as one line a user can act on."""


def first_line(err: BaseException, limit: int = 160) -> str:
    """An exception's first non-empty line (or its type's name), to quote inside a one-line error."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return (lines[0] if lines else type(err).__name__)[:limit]


@dataclass
class SyntheticConfig:
    """Seeded GBM market with Markov regime switching and Poisson jumps."""

    n_bars: int = 5000
    n_underlyings: int = 1
    seed: int = 0
    start_date: str = "2000-01-03"
    initial_price: float = 100.0
    regime_drift: list[float] = field(default_factory=lambda: [0.10, -0.15])  # annualised, one per regime
    regime_vol: list[float] = field(default_factory=lambda: [0.12, 0.35])  # annualised, one per regime
    regime_switch_prob: float = 0.01  # chance per bar of leaving the current regime
    correlation: float = 0.6  # loading on the common factor when n_underlyings > 1
    jumps_per_year: float = 4.0
    jump_mean: float = -0.02  # mean log jump size
    jump_std: float = 0.04
    base_volume: float = 1.0e8  # shares a bar: a liquid name, so the option-volume cap rarely binds
    signal_strength: float = 0.0  # >0 plants a learnable next-bar signal in the volume (tests use it)
    iv_premium: float = 1.25  # the iv column: the regime's true vol x this (a variance risk premium, like VIX's)


@dataclass
class DataConfig:
    source: str = "sp500"  # a built-in name (sp500, synthetic), a CSV/parquet file, a folder of them, or paths joined by ','
    symbols: list[str] | None = None  # keep only these underlyings of a multi-symbol source
    window: int = 30  # TW: bars in one observation (CLSTM-PPO paper: 30)
    train_end: str | None = None  # last date of the training split; None: the built-in's default, else train_frac
    val_end: str | None = None  # last date of the validation split; the test split is what follows
    train_frac: float = 0.70  # used only when no split dates are known
    val_frac: float = 0.15
    periods_per_year: int = 252  # bars per year, for annualising volatility (daily: 252)
    vol_window: int = 20  # bars in the realised-volatility estimate
    volume_window: int = 20  # bars in the volume z-score
    turbulence_lookback: int = 252  # bars before t that give mu and Sigma (FinRL: 252)
    turbulence_quantile: float = 0.90  # threshold = this quantile of training-split turbulence (paper: 0.90)
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)


@dataclass
class CostConfig:
    """Fees per contract (US listed options, 2024 levels) and the quoted-spread and slippage model."""

    commission_per_contract: float = 0.65  # typical US retail broker (e.g. Interactive Brokers' tiered rate)
    commission_min_per_order: float = 1.00  # the same brokers' per-order minimum
    occ_clearing_per_contract: float = 0.025  # OCC clearing fee, both sides
    finra_taf_per_contract: float = 0.00279  # FINRA Trading Activity Fee, sells only
    sec_fee_per_million: float = 27.80  # SEC Section 31 fee on sale proceeds; the rate is reset every fiscal year
    orf_per_contract: float = 0.02  # options regulatory fee (exchange-set, about $0.02), both sides
    spread_base: float = 0.03  # quoted spread as a share of mid for a liquid at-the-money option
    spread_min: float = 0.02  # the spread is clamped to [spread_min, spread_max] of mid
    spread_max: float = 0.10
    spread_cheap_price: float = 2.0  # options with mid (per share) below this quote wider ...
    spread_cheap_coef: float = 1.0  # ... by up to this factor
    spread_moneyness_coef: float = 5.0  # wider by this factor per unit |ln(K/S)|
    spread_vol_coef: float = 1.0  # wider by this factor per unit of implied vol above 20%
    slippage_coef: float = 0.5  # price impact share of mid per (order contracts / option volume)
    max_slippage: float = 0.05  # impact is capped at this share of mid
    # Option-volume proxy of one strike (docs/MARKET.md): underlying volume x ratio at the money at <= 30 days,
    # less for far strikes and long expiries. 1e-4 puts a Dow stock's ATM strike at 1,000-3,000 contracts a day
    # (10-30M shares); the S&P 500's volume column sums its members' shares, so it overstates SPX strikes ~30x.
    option_volume_ratio: float = 1.0e-4
    volume_moneyness_width: float = 0.10  # volume falls by e per this |ln(K/S)| (0.90 and 1.10 strikes: 37% of ATM)
    volume_expiry_power: float = 1.0  # ... and as (30 days / T) ^ power beyond 30 days
    min_option_volume: float = 50.0  # option-volume proxy floor (and its value without a volume column)
    max_volume_share: float = 0.10  # an opening order takes at most this share of its strike's volume proxy
    share_cost_bps: float = 1.0  # trading the underlying (an index fund, a liquid stock): spread + commission, bp


@dataclass
class MarketConfig:
    # Used only where the data has no rate series (the embedded S&P 500 has the 3-month T-bill; a file may
    # carry a `rate` column).
    risk_free_rate: float = 0.02  # r, continuously compounded
    dividend_yield: float = 0.015  # q for prices without dividends in them (0 where Adj Close was applied)
    # Implied vol (SPEC 4a, docs/MARKET.md): auto = the data's iv/vix column if it has one, else the model.
    iv_source: str = "auto"  # auto, column or model (model: ignore any iv column)
    # 30-day ATM vol = this x the data's iv column (or the model, fitted to the VIX): the VIX is a variance-swap
    # rate that sits above ATM vol by about the skew's share. 1.0 for a column that already holds ATM vol.
    # 0.89: fitted on the training years only (S&P 500 with VIX, 2000-2012), the grid 0.80..1.05 minimising the
    # simulated CBOE PutWrite/BuyWrite's mean absolute difference from the real PUT/BXM annual returns
    # (python scripts/cboe_benchmarks.py --calibrate; docs/MARKET.md section 5).
    atm_per_iv: float = 0.89
    ewma_lambda: float = 0.94  # the model's volatility estimate: RiskMetrics' daily EWMA decay
    leverage_lambda: float = 0.90  # decay of the EWMA of signed returns in the model's leverage term
    # log IV = a + b log(sigma_ewma) + c leverage: fitted on the S&P 500 with VIX, training split 2000-2012
    # only (scripts/fit_iv_model.py reproduces these; tests/test_vol_model.py checks them).
    iv_model_coefs: list[float] = field(default_factory=lambda: [-0.3277, 0.6994, -1.4935])
    # iv(K, T) = atm(T) - iv_skew z + iv_smile z^2, z = ln(K/S) / sqrt(T / 30 days) clipped to +-iv_wing_z: the
    # 0.95 strike ~6.2 vol points over the money at 30 days, the 1.05 strike ~4.9 under (SPX in calm markets,
    # SPEC 4a: 5-8 points); flat beyond the wing so far strikes stay below ~ATM + 30 points. Set by hand: no
    # option-chain data ships here.
    iv_skew: float = 1.1
    iv_smile: float = 2.0
    iv_wing_z: float = 0.2
    term_reversion: float = 4.0  # kappa per year: ATM variance reverts to the training median (0: flat term)
    min_iv: float = 0.03  # absolute bounds on any strike's implied vol
    max_iv: float = 2.00
    allow_short: bool = True  # sell-to-open calls and puts, under margin
    stock_targets: list[float] = field(default_factory=lambda: [0.0, 0.5, 1.0])  # underlying exposures, x equity
    # Short option margin per share (Cboe/FINRA): max(premium + a x spot - out-of-the-money amount, premium + b x
    # (strike for puts, spot for calls)); [a, b] for broad-based indices and for single stocks. auto: index
    # rates for the built-in indices (sp500, synthetic), stock rates for files.
    margin_style: str = "auto"  # auto, index or stock
    index_margin: list[float] = field(default_factory=lambda: [0.15, 0.10])
    stock_margin: list[float] = field(default_factory=lambda: [0.20, 0.10])
    moneyness: list[float] = field(default_factory=lambda: [0.95, 1.00, 1.05])  # strike / spot of the chain
    expiries_days: list[int] = field(default_factory=lambda: [30, 60])  # calendar days to expiry
    strike_step: float = 0.0  # strikes round to this; 0: the largest of 0.01, 0.05, ..., 100 below 0.5% of spot
    multiplier: int = 100  # shares per contract
    costs: CostConfig = field(default_factory=CostConfig)


@dataclass
class EnvConfig:
    initial_cash: float = 1_000_000.0  # an S&P 500 index option costs $2k-$15k a contract
    max_positions: int = 5  # open positions at once
    position_frac: float = 0.05  # premium paid per new position, as a share of equity
    episode_length: int = 252  # bars; 0: from the split's first valid bar to its end
    ruin_fraction: float = 0.5  # the episode ends early once equity falls below this share of initial cash
    reward_scale: float = 10.0  # reward = change in equity / initial cash x this: a 1% gain is 0.1
    drawdown_penalty: float = 0.0  # optional shaping: minus this x (drawdown share of peak equity) per bar
    turbulence_penalty: float = 0.0  # optional shaping: minus this x (open positions while turbulent) per bar
    dtype: str = "float32"  # float32 (fast, on GPU too) or float64 (exact accounting, used by the tests)


@dataclass
class AgentConfig:
    """Cascaded LSTM sizes (paper: lstm1_hidden 128, mlp_hidden 128, lstm2_hidden 512)."""

    lstm1_hidden: int = 64  # LSTM 1: feature extractor over the TW-bar window
    mlp_hidden: int = 64  # the 3-layer tanh MLP after LSTM 1
    lstm2_hidden: int = 128  # LSTM 2: recurrent policy over the decision sequence


@dataclass
class PPOConfig:
    """Paper Table 1 where it speaks (gamma, clip, coefficients, Adam, 128 steps); CleanRL's otherwise."""

    num_steps: int = 128  # steps per env copy per update
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    clip_vloss: bool = False  # clipping value steps to +-clip_coef slows the critic on unnormalised returns
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5
    learning_rate: float = 3.0e-4
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    adam_eps: float = 1.0e-8
    lr_schedule: str = "linear"  # linear (decays to 0 at the end of the budget) or constant
    warmup_updates: int = 0  # >0: ramp the learning rate up linearly over this many updates first
    scale_lr_with_workers: bool = False  # multiply the learning rate by the number of workers (linear scaling)
    update_epochs: int = 4
    num_minibatches: int = 4  # minibatches are groups of whole env sequences
    grad_accumulation: int = 1  # sum the gradients of this many minibatches before each optimizer step
    norm_adv: bool = True
    target_kl: float | None = None  # stop the epochs of an update early above this approximate KL


@dataclass
class TrainConfig:
    num_envs: int = 64  # env copies per worker
    total_steps: int = 500_000  # env steps (all copies, all workers); ignored when num_episodes > 0
    num_episodes: int = 0  # >0: stop once this many training episodes have ended
    device: str = "auto"  # auto, cpu or cuda
    precision: str = "fp32"  # fp32, bf16 (autocast) or fp16 (autocast + GradScaler)
    compile: bool = False  # torch.compile the market encoder (LSTM 1 + MLP), where most of the FLOPs are
    eval_every: int = 10  # updates between evaluations: one continuous walk over the whole validation split
    checkpoint_dir: str = "checkpoints"
    run_name: str = ""  # empty: <data source>-<config name>
    keep_last: int = 3  # periodic checkpoints kept besides latest.pt and best_*.pt
    checkpoint_every: int = 10  # updates between periodic checkpoints
    pretraining: bool = False
    pretrain_epochs: int = 5
    pretrain_batch_size: int = 256
    pretrain_lr: float = 1.0e-3
    wandb: bool = False
    wandb_project: str = "clstm_ppo"
    tensorboard: str = ""  # a folder: metrics.jsonl's records also as TensorBoard scalars there; empty: off
    early_stopping_patience: int = 0  # >0: stop after this many evaluations without a new best composite
    threads_per_worker: int = 0  # CPU threads per worker; 0: the machine's cores divided among its workers
    # DistributedDataParallel's knobs (seed 002 names them): PyTorch's bucket size and dynamic graph; gradients
    # as views of the buckets save one copy of them. Not yet measured on GPUs here (docs/BENCHMARKS.md).
    ddp_bucket_cap_mb: float = 25.0
    ddp_static_graph: bool = False
    ddp_gradient_as_bucket_view: bool = True
    dist_timeout_s: float = 600.0  # a rank waiting longer than this at a collective fails the run instead of hanging


@dataclass
class Config:
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    market: MarketConfig = field(default_factory=MarketConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


# ---------------------------------------------------------------- allowed values

CHOICES = {
    "train.device": ("auto", "cpu", "cuda"),
    "train.precision": ("fp32", "bf16", "fp16"),
    "ppo.lr_schedule": ("linear", "constant"),
    "env.dtype": ("float32", "float64"),
    "market.iv_source": ("auto", "column", "model"),
    "market.margin_style": ("auto", "index", "stock"),
}
# Interval rules for numeric settings (a list setting: every entry). Written as they read in the error.
LIMITS = {
    "data.window": ">= 1", "data.train_frac": "(0, 1)", "data.val_frac": "(0, 1)", "data.periods_per_year": ">= 1",
    "data.vol_window": ">= 2", "data.volume_window": ">= 2", "data.turbulence_lookback": ">= 2",
    "data.turbulence_quantile": "(0, 1]",
    "market.risk_free_rate": "(-1, 1)", "market.dividend_yield": "(-1, 1)",  # negative rates do occur
    "market.iv_model_coefs": "(-100, 100)", "market.atm_per_iv": "(0, 2]", "market.ewma_lambda": "(0, 1)",
    "market.leverage_lambda": "(0, 1)", "market.iv_skew": ">= 0", "market.iv_smile": ">= 0",
    "market.iv_wing_z": "> 0", "market.term_reversion": ">= 0", "market.min_iv": "> 0", "market.max_iv": "> 0",
    "market.stock_targets": "[0, 1]", "market.index_margin": "[0, 1]", "market.stock_margin": "[0, 1]",
    "market.moneyness": "> 0", "market.expiries_days": ">= 1", "market.strike_step": ">= 0",
    "market.multiplier": ">= 1",
    "market.costs.commission_per_contract": ">= 0", "market.costs.commission_min_per_order": ">= 0",
    "market.costs.occ_clearing_per_contract": ">= 0", "market.costs.finra_taf_per_contract": ">= 0",
    "market.costs.sec_fee_per_million": ">= 0", "market.costs.orf_per_contract": ">= 0",
    "market.costs.spread_base": "[0, 1]", "market.costs.spread_min": "[0, 1]", "market.costs.spread_max": "[0, 1]",
    "market.costs.spread_cheap_price": ">= 0", "market.costs.spread_cheap_coef": ">= 0",
    "market.costs.spread_moneyness_coef": ">= 0", "market.costs.spread_vol_coef": ">= 0",
    "market.costs.slippage_coef": ">= 0", "market.costs.max_slippage": "[0, 1)",
    "market.costs.option_volume_ratio": ">= 0", "market.costs.min_option_volume": "> 0",
    "market.costs.volume_moneyness_width": "> 0", "market.costs.volume_expiry_power": ">= 0",
    "market.costs.max_volume_share": "(0, 1]", "market.costs.share_cost_bps": ">= 0",
    "env.initial_cash": "> 0", "env.max_positions": ">= 1", "env.position_frac": "(0, 1]",
    "env.episode_length": ">= 0", "env.ruin_fraction": "[0, 1)", "env.reward_scale": "> 0",
    "env.drawdown_penalty": ">= 0", "env.turbulence_penalty": ">= 0",
    "agent.lstm1_hidden": ">= 1", "agent.mlp_hidden": ">= 1", "agent.lstm2_hidden": ">= 1",
    "ppo.num_steps": ">= 1", "ppo.gamma": "[0, 1]", "ppo.gae_lambda": "[0, 1]", "ppo.clip_coef": "> 0",
    "ppo.vf_coef": ">= 0", "ppo.ent_coef": ">= 0", "ppo.max_grad_norm": "> 0", "ppo.learning_rate": "> 0",
    "ppo.adam_betas": "[0, 1)", "ppo.adam_eps": "> 0", "ppo.warmup_updates": ">= 0", "ppo.update_epochs": ">= 1",
    "ppo.num_minibatches": ">= 1", "ppo.grad_accumulation": ">= 1", "ppo.target_kl": "> 0",
    "train.num_envs": ">= 1", "train.total_steps": ">= 0", "train.num_episodes": ">= 0", "train.eval_every": ">= 1",
    "train.keep_last": ">= 1", "train.checkpoint_every": ">= 1",
    "train.pretrain_epochs": ">= 1", "train.pretrain_batch_size": ">= 1", "train.pretrain_lr": "> 0",
    "train.early_stopping_patience": ">= 0", "train.threads_per_worker": ">= 0", "train.dist_timeout_s": "> 0",
    "train.ddp_bucket_cap_mb": "> 0",
}


def _obeys(value: float, rule: str) -> bool:
    if rule[0] in "([":  # an interval such as (0, 1]
        low, high = (float(x) for x in rule[1:-1].split(","))
        above = value > low if rule[0] == "(" else value >= low
        return above and (value < high if rule[-1] == ")" else value <= high)
    op, bound = rule.split()
    return value > float(bound) if op == ">" else value >= float(bound)


def _get(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def check_values(cfg: Config) -> None:
    """Every setting within its allowed values and the settings consistent with each other, or a one-line error."""
    for key, allowed in CHOICES.items():
        if _get(cfg, key) not in allowed:
            raise ConfigError(f"config: {key} is {_get(cfg, key)!r}; choose one of {', '.join(allowed)}")
    for key, rule in LIMITS.items():
        value = _get(cfg, key)
        for v in (value if isinstance(value, list) else [] if value is None else [value]):
            if not _obeys(v, rule):
                interval = f"in {rule}" if rule[0] in "([" else rule
                raise ConfigError(f"config: {key} must be {interval}, got {value!r}")
    d, m, p, t = cfg.data, cfg.market, cfg.ppo, cfg.train
    pairs = [
        (not m.moneyness or not m.expiries_days, "market.moneyness and market.expiries_days need at least one entry"),
        (len(m.index_margin) != 2 or len(m.stock_margin) != 2,
         "market.index_margin and market.stock_margin need two rates each: [a, b], e.g. [0.15, 0.10]"),
        (len(set(m.stock_targets)) != len(m.stock_targets), f"market.stock_targets repeat a value: {m.stock_targets}"),
        (len(m.iv_model_coefs) != 3, f"market.iv_model_coefs needs three entries (a, b, c), got {m.iv_model_coefs}"),
        (m.min_iv >= m.max_iv, f"market.min_iv ({m.min_iv}) must be below market.max_iv ({m.max_iv})"),
        (m.costs.max_volume_share * m.costs.min_option_volume < 1,
         f"market.costs.max_volume_share x min_option_volume ({m.costs.max_volume_share} x "
         f"{m.costs.min_option_volume}) must be at least 1 contract, or no order on a thin strike could fill"),
        (m.costs.spread_min > m.costs.spread_max,
         f"market.costs.spread_min ({m.costs.spread_min}) must not exceed spread_max ({m.costs.spread_max})"),
        (d.train_frac + d.val_frac >= 1,
         f"data.train_frac + data.val_frac ({d.train_frac} + {d.val_frac}) must leave a test split (sum below 1)"),
        (len(p.adam_betas) != 2, f"ppo.adam_betas needs two entries (beta1, beta2), got {p.adam_betas}"),
        (t.num_envs % p.num_minibatches != 0,
         f"train.num_envs ({t.num_envs}) must be a multiple of ppo.num_minibatches ({p.num_minibatches}): "
         "minibatches are whole env sequences"),
        (p.num_minibatches % p.grad_accumulation != 0,
         f"ppo.grad_accumulation ({p.grad_accumulation}) must divide ppo.num_minibatches ({p.num_minibatches})"),
        (t.total_steps < 1 and t.num_episodes < 1, "train.total_steps must be at least 1 (or set train.num_episodes)"),
    ]
    for broken, message in pairs:
        if broken:
            raise ConfigError(f"config: {message}")


# ---------------------------------------------------------------- dict <-> dataclass


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; ints widen to floats, nothing else is guessed."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                pass
        raise ConfigError(f"config: {key} must be {_type_name(tp)}, got {value!r}")
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config: {key} must be a list, got {value!r}")
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"config: {key} must be a mapping of settings, got {value!r}")
        return from_dict(tp, value, prefix=f"{key}.")
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
    raise ConfigError(f"config: {key} must be {_type_name(tp)}, got {value!r}")


# Settings that existed once: a checkpoint's saved settings drop them quietly; a user's file or flag is told why.
OBSOLETE = {
    "market.iv_premium": "implied vol now comes from the data's iv/vix column or the fitted model "
                         "(market.iv_source, docs/MARKET.md)",
    "train.eval_episodes": "validation is now one continuous walk over the whole split",
}


def without_obsolete(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``values`` (nested) without the keys in OBSOLETE: for settings saved by an older version."""
    return {k: without_obsolete(v, f"{prefix}{k}.") if isinstance(v, dict) else v
            for k, v in values.items() if f"{prefix}{k}" not in OBSOLETE}


def from_dict(cls: type, values: dict[str, Any], prefix: str = "") -> Any:
    """Build dataclass ``cls`` from a (possibly partial) nested dict."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        if f"{prefix}{key}" in OBSOLETE:
            raise ConfigError(f"config: '{prefix}{key}' was removed: {OBSOLETE[prefix + key]}; drop it")
        if key not in hints:
            raise ConfigError(f"config: unknown key '{prefix}{key}'; valid keys here: {', '.join(names)}")
        kwargs[key] = _coerce(value, hints[key], prefix + key)
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _parse_override(text: str) -> dict[str, Any]:
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: write it as section.key=value, e.g. --set data.window=20")
    dotted, raw = text.split("=", 1)
    value = yaml.safe_load(raw) if raw.strip() else None  # YAML gives 3 -> int, 0.5 -> float, [1,2] -> list
    nested: dict[str, Any] = {}
    cursor = nested
    parts = dotted.strip().split(".")
    for part in parts[:-1]:
        cursor = cursor.setdefault(part, {})
    cursor[parts[-1]] = value
    return nested


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                base: dict[str, Any] | None = None) -> Config:
    """Defaults (or ``base``, e.g. a checkpoint's settings), then the YAML file at ``path``, then overrides."""
    values = _merge(to_dict(Config()), without_obsolete(base or {}))
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} not found; pass an existing YAML file to --config")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"config file {path} is not valid YAML: {first_line(err)}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of sections, not {type(loaded).__name__}")
        values = _merge(values, loaded)
    for text in overrides or []:
        values = _merge(values, _parse_override(text))
    cfg = from_dict(Config, values)
    check_values(cfg)
    return cfg


def save_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
