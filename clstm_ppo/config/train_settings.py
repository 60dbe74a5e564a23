"""The run's own sections of the settings, by what each setting is for: ``train`` (the budget),
``launch`` (where and how it executes), ``pretrain`` and ``prior`` (what shapes the policy before
and beside PPO) and ``output`` (what it writes). Kept beside ``sections.py`` for their length
(docs/TRAINING.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from clstm_ppo.config.fields import Section, setting

# The overrides of a run trained from nothing, without a rule prior (its cloning and the fading pull
# toward the rule): PPO alone, as the benchmarks measure it. The default run has none.
WITHOUT_RULE_PRIOR = ("pretrain.enabled=false", "prior.kl=0")
# The rule prior as the default run had it before 2026-12-04 (configs/contracts.yaml): the training
# years' best rule cloned, then a pull toward it fading over the first half of training.
RULE_PRIOR = ("pretrain.enabled=true", "pretrain.method=rule", "prior.kl=0.5")


@dataclass
class TrainConfig(Section):
    """The budget and how the run keeps its best: env copies, env steps or episodes,
    validation walks."""

    path: ClassVar[str] = "train"
    num_envs: int = setting(32, "env copies per worker", limits=">= 1", flag="--num-envs")
    total_steps: int = setting(
        200_000,
        "env steps (all copies, all workers); ignored when num_episodes > 0",
        limits=">= 0",
        flag="--total-steps",
    )
    num_episodes: int = setting(
        0,
        ">0: stop once this many full-length training episodes have ended",
        limits=">= 0",
        flag="--num-episodes",
    )
    eval_every: int = setting(
        10,
        "updates between evaluations: one continuous walk over the whole validation split",
        limits=">= 1",
        flag="--eval-every",
    )
    selection_window: int = setting(
        3, "validation walks whose mean composite selects best_composite_smoothed.pt", limits=">= 1"
    )
    early_stopping_patience: int = setting(
        0,
        ">0: stop after this many evaluations without a new best composite",
        limits=">= 0",
        flag="--early-stopping-patience",
    )


@dataclass
class LaunchConfig(Section):
    """Where and how the run executes: device, threads, precision, what is compiled
    or captured, DDP."""

    path: ClassVar[str] = "launch"
    device: str = setting(
        "auto",
        "where workers train: auto, cpu or cuda",
        choices=("auto", "cpu", "cuda"),
        flag="--device",
    )
    threads_per_worker: int = setting(
        0,
        "CPU threads per worker; 0: the cores this process may use "
        "(its CPU affinity) divided among its workers",
        limits=">= 0",
    )
    precision: str = setting(
        "fp32",
        "fp32, bf16 (autocast) or fp16 (autocast + GradScaler)",
        choices=("fp32", "bf16", "fp16"),
    )
    compile_encoder: bool = setting(
        False, "torch.compile the market encoder (LSTM 1 + MLP), where most of the FLOPs are"
    )
    # On a GPU the eager env step is hundreds of kernel launches; compiled it is a few fused
    # kernels. On a CPU the eager step is faster than inductor's code (docs/BENCHMARKS.md),
    # so auto compiles on CUDA only.
    compile_loop: str = setting(
        "auto",
        "torch.compile the training loop's steps: the env step with each rollout "
        "decision as one graph, and the PPO update's loss in fixed shapes: auto (on "
        "CUDA), on, off",
        choices=("auto", "on", "off"),
    )
    # A CUDA graph replays a compiled decision's kernels in one launch; on a
    # CPU there is nothing to replay.
    cuda_graphs: str = setting(
        "auto",
        "replay each compiled rollout decision (policy, draw, env step, storage "
        "write) and the update's optimizer step (fp32, bf16) each as one CUDA graph: "
        "auto (on CUDA when launch.compile_loop compiles), on, off; no effect on a "
        "CPU",
        choices=("auto", "on", "off"),
    )
    # Measured only as the update alone (docs/BENCHMARKS.md): off until a GPU lease has checked it
    # inside the trainer (scripts/ops/gpu_check.py's "train update graphs" rows).
    update_graphs: bool = setting(
        False,
        "also replay the update's compiled minibatch loss as CUDA graphs (inductor's "
        "reduce-overhead mode; docs/BENCHMARKS.md); needs "
        "launch.cuda_graphs, ppo.grad_accumulation 1 and fp32 or bf16; no effect on "
        "a CPU",
    )
    # DistributedDataParallel's knobs (seed 002 names them): PyTorch's bucket size and dynamic
    # graph; gradients as views of the buckets save one copy of them. On 2 CPU workers the variants
    # were within noise; not yet measured on GPUs (docs/BENCHMARKS.md).
    ddp_bucket_cap_mb: float = setting(25.0, "DDP's gradient bucket size in MB", limits="> 0")
    ddp_static_graph: bool = setting(False, "DDP's static_graph")
    ddp_gradient_as_bucket_view: bool = setting(True, "DDP's gradient_as_bucket_view")
    dist_timeout_s: float = setting(
        600.0,
        "a rank waiting longer than this at a collective fails the run instead of hanging",
        limits="> 0",
    )
    ranks_per_gpu: int = setting(
        1,
        "a test mode: this many ranks share each GPU, over gloo (NCCL refuses two ranks "
        "on one device), so --num-gpus 2 runs the multi-rank path on one GPU; it "
        "measures nothing about speed (docs/DISTRIBUTED.md)",
        limits=">= 1",
    )


@dataclass
class PretrainConfig(Section):
    """What happens before the first PPO update (docs/TRAINING.md, "Pretraining")."""

    path: ClassVar[str] = "pretrain"
    # The default run starts from nothing: a clone of the rule is near-deterministic, so PPO's
    # samples never leave it and a planted edge goes unfound; the scale agent from nothing is
    # even with the contracts agent started from the rule on the S&P 500 (docs/RESULTS.md, "The
    # default run").
    enabled: bool = setting(
        False, "pretrain before the first update, by pretrain.method", flag="--pretraining"
    )
    method: str = setting(
        "rule",
        "what --pretraining does: supervised (LSTM 1 on the next bar's "
        "return), maml or protonet (3-way few-shot tasks, clstm_ppo/meta/), "
        "or rule (the whole policy cloned from the best fixed rule of the "
        "training years: docs/TRAINING.md)",
        choices=("supervised", "maml", "protonet", "rule"),
    )
    epochs: int = setting(5, "pretraining passes over the training split", limits=">= 1")
    batch_size: int = setting(256, "windows per pretraining batch", limits=">= 1")
    lr: float = setting(1.0e-3, "pretraining's Adam learning rate", limits="> 0")


@dataclass
class PriorConfig(Section):
    """The rule prior (pretrain.method rule): the rule cloned and the pull toward it
    (docs/TRAINING.md)."""

    path: ClassVar[str] = "prior"
    rules: str = setting(
        "unconditional",
        "pretrain.method rule: which family the prior is the best of on the "
        "training years: unconditional (the 147 fixed rules) or conditional "
        "(those rules gated on the implied-vol state, as "
        "best_conditional_rule)",
        choices=("unconditional", "conditional"),
    )
    rollouts: int = setting(
        40,
        "pretrain.method rule: at most this many rollouts of the rule cloned, fewer "
        "once a fresh one's decisions match it at prior.accuracy",
        limits=">= 1",
    )
    epochs: int = setting(
        20, "pretrain.method rule: passes over each cloned rollout", limits=">= 1"
    )
    lr: float = setting(3.0e-3, "pretrain.method rule: cloning's Adam learning rate", limits="> 0")
    # A clone fitted to the rule's action alone ends near-deterministic (p ~0.995 on its walks),
    # so PPO's samples almost never try anything else and no run has left its rule: smoothing
    # keeps the others in its samples.
    smoothing: float = setting(
        0.0,
        "pretrain.method rule: share of cloning's target spread evenly over the "
        "decision's valid actions (label smoothing), the rest on the rule's; 0: "
        "the rule's action alone",
        limits="[0, 1)",
    )
    accuracy: float = setting(
        0.98,
        "pretrain.method rule: cloning stops once this share of a fresh rollout's "
        "greedy decisions are the rule's",
        limits="(0, 1]",
    )
    kl: float = setting(
        0.0,
        "pretrain.method rule: weight of -log pi(the rule's action) in the PPO loss at "
        "the first update (the KL from the rule to the policy), falling linearly to 0 at "
        "prior.kl_until of the planned env steps; 0: off",
        limits=">= 0",
    )
    kl_until: float = setting(
        0.5, "share of the planned env steps after which the prior's penalty is 0", limits="(0, 1]"
    )


@dataclass
class OutputConfig(Section):
    """What a run writes and where: run folders, checkpoints, W&B and TensorBoard."""

    path: ClassVar[str] = "output"
    checkpoint_dir: str = setting("checkpoints", "folder of run folders", flag="--checkpoint-dir")
    run_name: str = setting(
        "", "run folder name; empty: <data source>-<config name>", flag="--run-name"
    )
    keep_last: int = setting(
        3, "periodic checkpoints kept besides latest.pt and best_*.pt", limits=">= 1"
    )
    checkpoint_every: int = setting(10, "updates between periodic checkpoints", limits=">= 1")
    # Every rank's env copies and LSTM 2 state are gathered to rank 0 and written
    # with each checkpoint: at tens of thousands of copies per GPU, hundreds of MB
    # per rank (docs/BENCHMARKS.md).
    rank_state_every: int = setting(
        1,
        "updates between checkpoints that carry every rank's env copies, LSTM 2 "
        "state and random streams (the last update's always does); a resume from "
        "one without them starts fresh episodes",
        limits=">= 1",
    )
    wandb: bool = setting(
        False, "log to Weights & Biases (WANDB_MODE=offline works)", flag="--wandb"
    )
    wandb_project: str = setting("clstm_ppo", "the W&B project")
    tensorboard: str = setting(
        "",
        "a folder: metrics.jsonl's records also as TensorBoard scalars there; empty: off",
        flag="--tensorboard",
    )
