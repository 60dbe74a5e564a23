"""Training a run from Python: ``train_run`` checks everything a launch needs, locks the run folder
and starts one worker (or one per GPU or CPU worker, spawned; under torchrun, joins its group).
``python -m clstm_ppo.train`` is its command line (docs/TRAINING.md).

    from clstm_ppo.training.launch import train_run
    run = train_run("smoke", ["train.total_steps=4096"])          # -> checkpoints/synthetic-smoke
    train_run("smoke", ["train.total_steps=8192"], resume_from="latest")
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from clstm_ppo.config import Config, ConfigError, load_config, with_defaults_at
from clstm_ppo.data.planted import planted_surface_notice
from clstm_ppo.device import (
    check_compile_toolchain,
    configure_backends,
    cuda_device_count,
    pick_device,
    usable_cores,
)
from clstm_ppo.distributed import (
    DistContext,
    find_free_port,
    init_group,
    leave_group,
    torchrun_context,
)
from clstm_ppo.env.tradability import untradable_notice
from clstm_ppo.market.observed import observed_market_data
from clstm_ppo.run_files.checkpoint import (
    has_run,
    remove_stale_writes,
    resolve_resume,
    run_lock,
)
from clstm_ppo.run_files.run_folder import (
    OUTPUT_SETTINGS,
    check_fresh_start,
    check_writable_folder,
    move_aside,
    remove_if_empty,
)
from clstm_ppo.run_files.run_state import RunState, load_checkpoint


class WorkersFailed(RuntimeError):
    """A spawned worker ended with an error (its last line is the message)."""


# train's own fixes for a resume file that is missing or not whole
RESUME_FIXES = (
    "a run folder holds latest.pt, best_<metric>.pt and update_*.pt: check the path",
    "resume from another file of the run, e.g. --resume-from latest or a best_*.pt",
)
# Where and how wide a run executes belongs to each launch, not to the run: a resume on another
# machine (a laptop after a GPU box, or GPUs after CPU workers) starts these from the defaults, not
# the checkpoint. So do the folders it writes to: they come from this launch's command line and
# config, never from a file's settings.
PER_LAUNCH_SETTINGS = ("launch.device", "launch.threads_per_worker", *OUTPUT_SETTINGS)


def resume_base(saved_config: dict) -> dict:
    """A checkpoint's settings with the per-launch ones reset to their defaults."""
    return with_defaults_at(saved_config, PER_LAUNCH_SETTINGS)


def check_budget_left(resume: RunState, cfg: Config) -> None:
    """A resume must have training left to do; otherwise say how to give it some."""
    t = cfg.train
    if t.num_episodes > 0 and resume.episodes >= t.num_episodes:
        raise ConfigError(
            f"the checkpoint already holds {resume.episodes:,} episodes, the budget of "
            f"train.num_episodes ({t.num_episodes:,}); pass a larger --num-episodes to train on"
        )
    if t.num_episodes <= 0 and resume.global_step >= t.total_steps:
        raise ConfigError(
            f"the checkpoint already holds {resume.global_step:,} env steps, the budget of "
            f"train.total_steps ({t.total_steps:,}); pass a larger --total-steps to train on"
        )


def default_run_name(cfg: Config, config: str | None) -> str:
    source = (
        Path(cfg.data.source).name.split(".")[0]
        if cfg.data.source not in ("sp500", "synthetic")
        else cfg.data.source
    )
    config_name = Path(config).name.removesuffix(".yaml") if config else "default"
    return f"{source}-{config_name}"


def plan_workers(
    num_gpus: int, num_workers: int | None, cfg: Config, oversubscribe: bool = False
) -> tuple[int, str, str | None]:
    """(number of workers, device kind, a notice to print) for a launch outside torchrun; more CPU
    workers than the usable cores only with ``oversubscribe``."""
    visible = cuda_device_count()
    if num_gpus == 0 or num_gpus < -1:
        raise ConfigError(f"--num-gpus {num_gpus} must be -1 (every GPU) or at least 1")
    if num_workers is not None and num_workers < 1:
        raise ConfigError(f"--num-workers {num_workers} must be at least 1")
    want_gpus = num_gpus != 1
    if cfg.launch.device == "cpu" or (cfg.launch.device == "auto" and visible == 0):
        if cfg.launch.device == "cpu" and want_gpus:
            raise ConfigError(
                f"--num-gpus {num_gpus} asks for GPUs but --device cpu was given; "
                "use --num-workers N for CPU workers"
            )
        workers = num_workers or 1
        notice = None
        if want_gpus and num_workers is None:
            workers = max(1, num_gpus)  # -1, every GPU: one worker when there is none
            notice = (
                f"no CUDA device is visible: running {workers} CPU worker(s) over gloo instead "
                f"(the same as --device cpu --num-workers {workers})"
            )
        cores = usable_cores()
        if workers > cores and not oversubscribe:
            # each worker is a process with its own copy of the run
            raise ConfigError(
                f"{workers} CPU workers asked for, but this process may use {cores} core(s): "
                f"use --num-workers {cores} or fewer, or add --oversubscribe if more are meant"
            )
        return workers, "cpu", notice
    if visible == 0:
        raise ConfigError(
            "--device cuda was asked for, but this machine has no CUDA device visible to torch; "
            "use --device cpu (or auto)"
        )
    if num_workers is not None:
        raise ConfigError(
            "--num-workers is for CPU workers; on GPUs use --num-gpus N (one worker per GPU)"
        )
    gpus = visible if num_gpus == -1 else num_gpus
    if gpus > visible * cfg.launch.ranks_per_gpu:
        raise ConfigError(
            f"--num-gpus {gpus} asks for more GPUs than the {visible} visible to this process "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
            f"use --num-gpus {visible} or -1"
        )
    return gpus, "cuda", None


def run_worker(
    local_rank: int,
    ctx: DistContext | None,
    cfg: Config,
    run_dir: Path,
    resume_path: Path | None,
    threads: int,
) -> None:
    """One worker: join the group, train, leave. Spawned workers get ``ctx=None`` and derive it
    from their index."""
    if ctx is None:
        ctx = DistContext(
            rank=local_rank,
            world_size=int(os.environ["CLSTM_PPO_WORLD_SIZE"]),
            local_rank=local_rank,
        )
    ctx = dataclasses.replace(ctx, ranks_per_gpu=cfg.launch.ranks_per_gpu)
    device = pick_device(cfg.launch.device, ctx.gpu_index)
    if device.type == "cpu":
        torch.set_num_threads(threads)
    configure_backends(device)
    init_group(ctx, device, cfg.launch.dist_timeout_s)
    trainer, finished = None, False
    try:
        from clstm_ppo.training.runner import Trainer  # imported late: argument errors stay fast

        resume = load_checkpoint(resume_path, *RESUME_FIXES) if resume_path else None
        wrap = None
        if ctx.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            # Only the eager update's forward goes through DDP (its backward all-reduces gradients;
            # the static update of launch.compile_loop averages them itself); rollouts and
            # checkpoints use the raw module, so DDP never enters a state_dict.
            launch = cfg.launch
            wrap = functools.partial(
                DDP,
                device_ids=[device.index] if device.type == "cuda" else None,
                bucket_cap_mb=launch.ddp_bucket_cap_mb,
                static_graph=launch.ddp_static_graph,
                gradient_as_bucket_view=launch.ddp_gradient_as_bucket_view,
            )
        trainer = Trainer(cfg, run_dir, device, ctx, resume, wrap)
        trainer.run()
        finished = True
    except torch.cuda.OutOfMemoryError:
        # The update's activations grow with a minibatch's decisions (docs/TRAINING.md,
        # "Memory at scale"): splitting each minibatch k ways with k-fold accumulation keeps
        # the same optimizer steps in 1/k of it.
        p, done = cfg.ppo, trainer.progress.update if trainer is not None else 0
        k = next((k for k in (4, 2) if cfg.train.num_envs % (k * p.num_minibatches) == 0), 0)
        # it refuses accumulation
        graphs = "--set launch.update_graphs=false " if cfg.launch.update_graphs else ""
        split = (
            f"split each minibatch with {graphs}--set ppo.num_minibatches={k * p.num_minibatches} "
            f"--set ppo.grad_accumulation={k * p.grad_accumulation} (the same optimizer steps; "
            f"about 1/{k} of the update's activations), or "
            if k
            else ""
        )
        saved = f"latest.pt holds update {done}" if done else "no checkpoint was written"
        raise ConfigError(
            f"CUDA ran out of memory on rank {ctx.rank}; {saved}; {split}lower --num-envs or the "
            "agent.* sizes"
        ) from None
    finally:
        # DDP holds the group's communicators: drop it before the group, or gloo's threads can abort
        # the process while the interpreter shuts down.
        del trainer
        gc.collect()
        leave_group(barrier=finished)


def spawn_workers(
    world_size: int,
    cfg: Config,
    run_dir: Path,
    resume_path: Path | None,
    port: int,
    threads: int,
    target=None,
) -> int:
    """Start one process per worker; forward SIGINT/SIGTERM to them so they stop
    at an update boundary.

    ``target`` replaces :func:`run_worker` (same arguments) in tests that instrument a worker.
    """
    import signal

    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), CLSTM_PPO_WORLD_SIZE=str(world_size)
    )
    context = mp.start_processes(
        target or run_worker,
        args=(None, cfg, run_dir, resume_path, threads),
        nprocs=world_size,
        join=False,
        start_method="spawn",
    )

    def forward(signum, frame):  # noqa: ARG001 (signal handler signature)
        for process in context.processes:
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not context.join(timeout=0.5, grace_period=10):
            pass
    except ProcessException as err:
        last = [line for line in str(err).strip().splitlines() if line.strip()][-1]
        raise WorkersFailed(f"worker {err.error_index} failed: {last.strip()}") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def settings_of(
    config: str | None,
    overrides: Sequence[str],
    settings: dict[str, Any] | None,
    base: dict | None = None,
) -> Config:
    """Defaults (or a checkpoint's settings), then ``config``, then ``overrides`` (``KEY=VALUE``),
    then ``settings`` (dotted keys, as the command's flags give them)."""
    flags = dict(settings or {})
    if "train.total_steps" in flags:
        flags["train.num_episodes"] = 0  # an explicit step budget replaces an episode budget
    return load_config(config, list(overrides), base=base, flags=flags)


def train_run(
    config: str | None = None,
    overrides: Sequence[str] = (),
    *,
    settings: dict[str, Any] | None = None,
    resume_from: str | None = None,
    fresh_start: bool = False,
    num_gpus: int = 1,
    num_workers: int | None = None,
    master_port: int | None = None,
    oversubscribe: bool = False,
) -> Path:
    """Train one run to its budget and return its folder (``output.checkpoint_dir`` /
    ``output.run_name``, or a name from the data and ``config``). ``config``: a named config or a
    YAML file; ``overrides``: ``KEY=VALUE`` strings; ``settings``: dotted keys to values.
    ``resume_from``: latest, composite, ... or a checkpoint path (the run's settings, then these);
    ``fresh_start``: move an existing run folder aside. ``num_gpus``/``num_workers``: DDP workers,
    one per GPU or CPU workers over gloo (no more CPU workers than cores unless ``oversubscribe``).
    Raises ``ConfigError`` (a bad setting, file or resume: one line) or ``WorkersFailed``."""
    if resume_from and fresh_start:
        raise ConfigError("--resume-from and --fresh-start contradict each other; pick one")
    group = torchrun_context()
    is_first = group is None or group.rank == 0
    cfg = settings_of(config, overrides, settings)
    if (settings or {}).get("output.run_name") == "":
        raise ConfigError(
            "--run-name is empty: give the run folder a name (e.g. --run-name mine), or leave the "
            "flag out for <data source>-<config name>"
        )
    check_writable_folder(Path(cfg.output.checkpoint_dir), "--checkpoint-dir")
    run_dir = Path(cfg.output.checkpoint_dir) / (
        cfg.output.run_name or default_run_name(cfg, config)
    )
    if fresh_start:
        check_fresh_start(run_dir)
    resume_path = None
    if resume_from:
        resume_path = resolve_resume(resume_from, run_dir)
        resume = load_checkpoint(resume_path, *RESUME_FIXES)
        # the run's, then these
        cfg = settings_of(config, overrides, settings, base=resume_base(resume.config))
        check_budget_left(resume, cfg)
    elif has_run(run_dir) and not fresh_start:
        raise ConfigError(
            f"{run_dir} already holds a run; continue it with --resume-from latest, "
            "start over with --fresh-start (the old run is moved aside), or pick --run-name"
        )
    data = observed_market_data(cfg)  # bad data fails here, in one line, before any worker starts
    if is_first:
        # an account that cannot hold what the agent may order says so once
        # (docs/MARKET.md, "Sizing")
        notice = untradable_notice(data, ("train", "validation"), cfg.market, cfg.env)
        if notice:
            print(notice)
        notice = planted_surface_notice(cfg)
        if notice:
            print(notice)
    if cfg.launch.compile_encoder:
        check_compile_toolchain(
            "cpu" if cfg.launch.device == "cpu" or cuda_device_count() == 0 else "cuda"
        )
    cores = usable_cores()
    share = lambda workers: cfg.launch.threads_per_worker or max(1, cores // workers)  # noqa: E731
    if group is None:
        workers, kind, notice = plan_workers(num_gpus, num_workers, cfg, oversubscribe)
        if kind == "cpu" and cfg.launch.precision == "fp16":
            raise ConfigError(
                "launch.precision fp16 needs a CUDA device; on the CPU use bf16 or fp32"
            )
    # Every check passed: only now is the run folder touched (locked, and with a fresh start moved
    # aside); a launch that fails before training wrote anything takes back the folder it made.
    made = is_first and not run_dir.exists()
    with contextlib.ExitStack() as held:
        if made:
            held.callback(remove_if_empty, run_dir)
        if is_first:
            held.enter_context(run_lock(run_dir))
            stale = remove_stale_writes(run_dir)
            if stale:
                print(
                    f"removed {len(stale)} unfinished checkpoint write(s) of a killed "
                    f"run: {', '.join(stale)}"
                )
            if resume_from:
                print(
                    f"resuming {run_dir} at update {resume.update} ({resume.global_step:,} env "
                    f"steps, written by {resume.world_size} worker(s))"
                )
            if fresh_start:
                moved = move_aside(run_dir)
                if moved:
                    print(f"--fresh-start: moved the previous run to {moved}")
                    held.callback(remove_if_empty, run_dir)
                    held.enter_context(run_lock(run_dir))  # the new, empty folder
        if group is not None:  # torchrun decides: join the group it describes, spawn nothing
            local_world = int(os.environ.get("LOCAL_WORLD_SIZE", group.world_size))
            run_worker(group.local_rank, group, cfg, run_dir, resume_path, share(local_world))
        elif workers == 1:
            if notice:
                print(notice)
            run_worker(0, DistContext(), cfg, run_dir, resume_path, share(1))
        else:
            if notice:
                print(notice)
            spawn_workers(
                workers, cfg, run_dir, resume_path, master_port or find_free_port(), share(workers)
            )
    return run_dir
