"""Every setting of a run, defined once: default, help and allowed values side by side.

The dataclass defaults are the default run (``clstm-ppo-train`` with no flags,
``--config default``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from clstm_ppo.config.consistency import check_values
from clstm_ppo.config.fields import Section, section, setting
from clstm_ppo.config.generated_markets import PlantedConfig, SyntheticConfig
from clstm_ppo.config.market_settings import MarketConfig
from clstm_ppo.config.train_settings import (
    LaunchConfig,
    OutputConfig,
    PretrainConfig,
    PriorConfig,
    TrainConfig,
)


@dataclass
class DataConfig(Section):
    path: ClassVar[str] = "data"
    source: str = setting(
        "sp500",
        "a built-in name (sp500, dow, synthetic, planted), a CSV/parquet file, a folder "
        "of them, or paths joined by ','",
        flag="--data",
    )
    symbols: list[str] | None = setting(
        None, "keep only these underlyings of a multi-symbol source"
    )
    window: int = setting(30, "TW: bars in one observation (CLSTM-PPO paper: 30)", limits=">= 1")
    train_end: str | None = setting(
        None, "last date of the training split; None: the built-in's default, else train_frac"
    )
    val_end: str | None = setting(
        None, "last date of the validation split; the test split is what follows"
    )
    test_end: str | None = setting(
        None,
        "last date of the test split (a walk-forward fold); no later bar is "
        "loaded; None: the data's last date",
    )
    train_frac: float = setting(0.70, "used only when no split dates are known", limits="(0, 1)")
    val_frac: float = setting(0.15, "used only when no split dates are known", limits="(0, 1)")
    periods_per_year: float | str = setting(
        "auto",
        "bars a year, which annualise every volatility, return and "
        "Sharpe ratio: auto reads them from the timestamps (daily stocks "
        "252, hourly FX 6240, 15-minute crypto 35040: docs/DATA.md); a "
        "number overrides",
        choices=("auto",),
        limits="[1, 1e9]",
    )
    vol_window: int = setting(20, "bars in the realised-volatility estimate", limits=">= 2")
    volume_window: int = setting(20, "bars in the volume z-score", limits=">= 2")
    turbulence_lookback: int = setting(
        252, "bars before t that give mu and Sigma (FinRL: 252)", limits=">= 2"
    )
    turbulence_quantile: float = setting(
        0.90,
        "threshold = this quantile of training-split turbulence (paper: 0.90)",
        limits="(0, 1]",
    )
    option_features: bool = setting(
        True,
        "the agent also observes the option market: the implied vol the env "
        "prices with, its premium over realized vol, its 5- and 20-bar changes "
        "and its z-score over a year (docs/ENVIRONMENT.md)",
    )
    augment: float = setting(
        0.0,
        "share of the training env's episodes started on the augmentation pool's paths; "
        "validation and test stay real",
        limits="[0, 1)",
    )
    augment_checkpoint: str = setting(
        "",
        "scenario generator the augmentation pool is sampled from "
        "(python -m clstm_ppo.scenarios train)",
    )
    augment_paths: int = setting(
        16, "paths in the augmentation pool (generator, bootstrap, fhs)", limits=">= 1"
    )
    augment_source: str = setting(
        "generator",
        "where the augmentation pool comes from: generator "
        "(data.augment_checkpoint), bootstrap (the real training bars, whole, "
        "in stationary blocks), fhs (filtered historical simulation of the "
        "training bars: docs/SCENARIOS.md) or underlyings "
        "(data.augment_underlyings' own histories up to the training split's "
        "end): docs/TRAINING.md",
        choices=("generator", "bootstrap", "fhs", "underlyings"),
    )
    augment_block: float = setting(
        0.0,
        "augment_source bootstrap: mean block length in bars; 0: Politis and White's "
        "on the squared returns",
        limits=">= 0",
    )
    augment_underlyings: str = setting(
        "",
        "augment_source underlyings: a data source (a built-in name such as dow, "
        "or files) whose underlyings train beside the real ones",
    )
    synthetic: SyntheticConfig = section(
        SyntheticConfig, "the synthetic market (data.source: synthetic)"
    )
    planted: PlantedConfig = section(
        PlantedConfig, "the planted-edge market (data.source: planted)"
    )


@dataclass
class EnvConfig(Section):
    path: ClassVar[str] = "env"
    initial_cash: float = setting(
        1_000_000.0,
        "starting cash (an S&P 500 index option costs $2k-$15k a contract)",
        limits="> 0",
    )
    max_positions: int = setting(5, "open positions at once", limits=">= 1")
    position_frac: float = setting(
        0.05, "premium paid per new position, as a share of equity", limits="(0, 1]"
    )
    # Premium sizing alone buys cheap options by the thousand (2017's calm: ~30x the contracts of
    # 2010-12 for the same dollars, and per-contract fees with them): docs/RESULTS.md. A risk
    # desk caps an order's notional.
    max_order_notional: float = setting(
        0.0,
        "an opening order holds at most this multiple of equity in notional "
        "(contracts x multiplier x spot); 0: no cap",
        limits="[0, 1000]",
    )
    episode_length: int = setting(
        252, "bars; 0: from the split's first valid bar to its end", limits=">= 0"
    )
    ruin_fraction: float = setting(
        0.5,
        "the episode ends early once equity falls below this share of initial cash",
        limits="[0, 1)",
    )
    reward_scale: float = setting(
        10.0,
        "reward = change in equity / initial cash x this: a 1% gain is 0.1 (dsr: "
        "dsr_rate x D_t x this)",
        limits="> 0",
    )
    # With "equity" a copy that only holds the index is paid the index's return, so a policy can
    # look skilled by owning the market; "excess" pays only what it makes beyond that; "dsr" pays
    # for return per unit of risk (docs/ENVIRONMENT.md, "Reward" and "Differential Sharpe ratio").
    reward: str = setting(
        "equity",
        "equity: the change in equity; excess: the change in equity less what holding "
        "the underlying with the same equity (dividends in) made over the bar; dsr: the "
        "differential Sharpe ratio D_t of the bar's return over the T-bill "
        "(Moody & Saffell 2001)",
        choices=("equity", "excess", "dsr"),
    )
    # A quarter (63 bars) of memory: long enough to judge a Sharpe ratio, short enough that the
    # moments settle well inside a 252-bar episode (the start's prior keeps (1 - 1/63)^252, under
    # 2%, of its weight by the end).
    dsr_rate: float = setting(
        1 / 63,
        "reward dsr: the moving moments' rate eta per bar (1/63: about a quarter of "
        "daily bars of memory)",
        limits="(0, 1)",
    )
    # The moments start at a mean of 0 and this squared, and the variance in D_t's denominator
    # never falls below (a tenth of it)^2: D_t is finite and bounded from the first bar (0, to
    # rounding, for an all-cash copy).
    dsr_prior_vol: float = setting(
        0.01,
        "reward dsr: the standard deviation per bar the moments start from "
        "(0.01: about 16% a year on daily bars); a tenth of it floors the "
        "volatility D_t divides by",
        limits="[0.0001, 1]",
    )
    drawdown_penalty: float = setting(
        0.0, "optional shaping: minus this x (drawdown share of peak equity) per bar", limits=">= 0"
    )
    turbulence_penalty: float = setting(
        0.0,
        "optional shaping: minus this x (open positions while turbulent) per bar",
        limits=">= 0",
    )
    dtype: str = setting(
        "float32",
        "float32 (fast, on GPU too) or float64 (exact accounting, used by the tests)",
        choices=("float32", "float64"),
    )
    # Without it every copy starts and ends its episodes on the same step, so each rollout sees one
    # phase of every episode and the critic trains on alternating halves. Walks, explicit starts, a
    # single copy and envs without autoreset keep exact lengths (BatchedOptionsEnv.staggered).
    stagger_starts: bool = setting(
        True,
        "cut each copy's first episode after a random reset to a random "
        "1..full length, spreading the copies over the episode's phase; later "
        "episodes run full length",
    )


@dataclass
class AgentConfig(Section):
    """Cascaded LSTM sizes (paper: lstm1_hidden 128, mlp_hidden 128, lstm2_hidden 512)."""

    path: ClassVar[str] = "agent"
    lstm1_hidden: int = setting(
        64, "LSTM 1: feature extractor over the TW-bar window", limits=">= 1"
    )
    mlp_hidden: int = setting(64, "the 3-layer tanh MLP after LSTM 1", limits=">= 1")
    lstm2_hidden: int = setting(
        128, "LSTM 2: recurrent policy over the decision sequence", limits=">= 1"
    )
    mlp_core_hidden: int = setting(
        128,
        "agent.kind mlp: the width of the two tanh layers that stand where LSTM 2 "
        "stands in the other kinds",
        limits=">= 1",
    )
    # The CLSTM-PPO paper's comparison (docs/BACKTEST.md); last, so AgentConfig(64,
    # 64, 128) still reads as sizes.
    kind: str = setting(
        "clstm",
        "clstm: LSTM 1 + MLP over the window, then LSTM 2; lstm: the current bar "
        "(projected to mlp_hidden) straight to LSTM 2; mlp: the current bar through two "
        "tanh layers mlp_core_hidden wide, no recurrence",
        choices=("clstm", "lstm", "mlp"),
    )
    # A near-uniform first policy opens a random option on most bars, and bought options
    # (premium = a share of equity) swing equity by far more than any planted edge: the
    # untrained agent's returns bury the signal.
    initial_hold: float = setting(
        0.0,
        "the untrained policy's probability of hold (0: uniform over the actions, "
        "as CleanRL's); e.g. 0.9 explores by trading on one bar in ten",
        limits="[0, 1)",
    )
    # Timing and sizing one exposure is where the literature's gains over fixed option-selling
    # rules came from; choosing among 31 orders at every bar buries that decision
    # (docs/ENVIRONMENT.md, "Scaling a rule"). The default since the planted market showed it:
    # scale finds part of a known edge where contracts walks its clone (docs/PLANTED.md).
    actions: str = setting(
        "scale",
        "what the agent chooses at each bar: contracts (an order of the chain, a "
        "stock target, a close) or scale (a multiple of one fixed rule's order, "
        "agent.scale_multiples of agent.scale_rule)",
        choices=("contracts", "scale"),
    )
    scale_multiples: list[float] = setting(
        [0.0, 0.5, 1.0, 1.5],
        "agent.actions scale: the multiples of the rule's "
        "order the agent chooses among; 1 (the rule as it "
        "is) among them",
        limits="[0, 10]",
    )
    scale_rule: str = setting(
        "",
        "agent.actions scale: the rule, in the words evaluate prints for best_rule or "
        "best_conditional_rule (e.g. 'sell put 0.95 x 30d, every free slot'); empty: the "
        "best of prior.rules' family on the training years, written here when the "
        "run starts",
    )


@dataclass
class PPOConfig(Section):
    """Paper Table 1 where it speaks (gamma, clip, coefficients, Adam, 128 steps);
    CleanRL's otherwise."""

    path: ClassVar[str] = "ppo"
    num_steps: int = setting(128, "steps per env copy per update", limits=">= 1")
    gamma: float = setting(0.99, "discount per bar", limits="[0, 1]")
    gae_lambda: float = setting(0.95, "GAE's lambda", limits="[0, 1]")
    # An option opened today pays out over its 30 days while other positions move the same
    # bars' equity: paid per bar, a decision's reward is buried in every other position's
    # P&L (docs/TRAINING.md, "Credit").
    credit: str = setting(
        "position",
        "what a step's reward holds: bar (the change in equity over the bar) or position "
        "(the bar's change less its options' P&L, plus the whole discounted P&L, within the "
        "rollout, of the option this step opened); env.reward equity or excess",
        choices=("bar", "position"),
    )
    # The equity reward is risk-neutral: where an option earns nothing, carrying it costs the
    # learner nothing, so it never learns to stand aside (docs/PLANTED.md, "Why"). A quadratic
    # utility charges a bar's variance.
    risk_aversion: float = setting(
        0.0,
        "the learner's utility of a bar's return x (a share of initial cash): x - "
        "risk_aversion / 2 x x^2 (mean-variance); credit position splits the bar's "
        "charge among its positions by their share of its P&L; 0: the reward as it "
        "is",
        limits="[0, 100]",
    )
    clip_coef: float = setting(0.2, "the surrogate's clip range", limits="> 0")
    clip_vloss: bool = setting(
        False, "clip value steps to +-clip_coef (slows the critic on unnormalised returns)"
    )
    vf_coef: float = setting(0.5, "weight of the value loss", limits=">= 0")
    ent_coef: float = setting(0.01, "weight of the entropy bonus", limits=">= 0")
    max_grad_norm: float = setting(0.5, "gradients are clipped to this global norm", limits="> 0")
    learning_rate: float = setting(3.0e-4, "Adam's base learning rate", limits="> 0")
    adam_betas: list[float] = setting([0.9, 0.999], "Adam's (beta1, beta2)", limits="[0, 1)")
    adam_eps: float = setting(1.0e-8, "Adam's epsilon", limits="> 0")
    lr_schedule: str = setting(
        "linear",
        "linear (decays to 0 at the end of the budget) or constant",
        choices=("linear", "constant"),
    )
    warmup_updates: int = setting(
        0, ">0: ramp the learning rate up linearly over this many updates first", limits=">= 0"
    )
    scale_lr_with_workers: bool = setting(
        False, "multiply the learning rate by the number of workers (linear scaling)"
    )
    update_epochs: int = setting(4, "passes over each rollout", limits=">= 1")
    # A scale agent's rule places an order on few bars (a 30-day put one at a time: ~1 in 7 on
    # the planted market); elsewhere its one valid action is no decision, yet counted it shrinks
    # the policy's terms by as much (docs/TRAINING.md, "Forced decisions"; docs/PLANTED.md
    # measured what skipping them changes).
    forced_decisions: str = setting(
        "count",
        "count: the policy loss, entropy and the advantages' normalisation "
        "average over every step (CleanRL's); skip: over the steps where more "
        "than one action was valid",
        choices=("count", "skip"),
    )
    num_minibatches: int = setting(
        4, "minibatches per epoch: groups of whole env sequences", limits=">= 1"
    )
    grad_accumulation: int = setting(
        1, "sum the gradients of this many minibatches before each optimizer step", limits=">= 1"
    )
    norm_adv: bool = setting(True, "normalise advantages over the whole rollout")
    target_kl: float | None = setting(
        None, "stop the epochs of an update early above this approximate KL", limits="> 0"
    )


@dataclass
class Config(Section):
    seed: int = setting(
        0, "seeds the env copies, the network and the minibatch order", flag="--seed"
    )
    data: DataConfig = section(DataConfig, "the bars, features and splits")
    market: MarketConfig = section(MarketConfig, "option pricing, the surface, margin and costs")
    env: EnvConfig = section(EnvConfig, "the trading account and its episodes")
    agent: AgentConfig = section(AgentConfig, "the cascaded LSTM's sizes")
    ppo: PPOConfig = section(PPOConfig, "the PPO update")
    train: TrainConfig = section(TrainConfig, "the budget, validation walks and early stopping")
    launch: LaunchConfig = section(LaunchConfig, "device, threads, precision, compilation and DDP")
    pretrain: PretrainConfig = section(PretrainConfig, "what runs before the first update")
    prior: PriorConfig = section(
        PriorConfig, "the rule prior: the rule cloned and the pull toward it"
    )
    output: OutputConfig = section(OutputConfig, "run folders, checkpoints, W&B and TensorBoard")

    def __post_init__(self) -> None:
        check_values(self)  # a config built in code obeys the same cross-setting rules as a file
