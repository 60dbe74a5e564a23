"""The loop a worker runs: start point, then rollout -> GAE -> PPO update -> evaluate -> checkpoint
until the budget is spent or a stop, then the last evaluation and checkpoint.

The ``Trainer`` (training/runner.py) holds the pieces and their state; these functions drive them.
Every rank runs the same loop, so every rank makes the same collectives in the same order; rank 0
alone evaluates, logs and writes files.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import torch

from clstm_ppo.config import save_config, to_dict
from clstm_ppo.distributed import TrainingFailure
from clstm_ppo.pretraining.encoder import pretrain
from clstm_ppo.run_files.tracking import Tracker
from clstm_ppo.training.reporting import Reporter, farewell
from clstm_ppo.training.stopping import StopRequest, agree

if TYPE_CHECKING:
    from clstm_ppo.training.runner import Trainer


def run(trainer: Trainer) -> None:
    """The worker's run: its log opened on rank 0, the updates until the budget is spent or a
    stop, the last evaluation and checkpoint (docs/TRAINING.md)."""
    cfg, t, main = trainer.cfg, trainer.cfg.train, trainer.ctx.is_main
    tracker, reporter = None, None
    if main:
        trainer.run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, trainer.run_dir / "config.yaml")
        total = t.total_steps if t.num_episodes <= 0 else None
        out = cfg.output
        tracker = Tracker(
            trainer.run_dir,
            total,
            to_dict(cfg),
            out.wandb,
            out.wandb_project,
            trainer.run_dir.name,
            initial_steps=trainer.progress.global_step,
            tensorboard=out.tensorboard,
        )
        reporter = Reporter(
            tracker, cfg, trainer.budget.batch_size, trainer.ctx.world_size, trainer.device
        )
        tracker.write(trainer.describe())
        tracker.write(trainer.plan.describe())
        if trainer.resume_note:
            tracker.write(f"resumed at update {trainer.progress.update}: {trainer.resume_note}")
    stop = StopRequest(announce=main)
    try:
        with stop.installed():
            stopped = _updates(trainer, reporter, tracker, stop)
        if not stopped:
            _save_rank_states(trainer)
        if main and trainer.progress.update % t.eval_every != 0 and not stopped:
            _evaluate_and_report(trainer, reporter)
            trainer.save_checkpoints()
    finally:
        if tracker is not None:
            tracker.close()
    if main:
        farewell(trainer.run_dir, trainer.selection.best)


def _start_point(trainer: Trainer, reporter: Reporter | None) -> None:
    """Where a new run's PPO starts: the rule prior's clone where the run has a prior, else the
    encoder fitted first by ``pretrain.method`` (supervised, maml or protonet)."""
    prior = trainer.ppo_update.prior
    if prior is not None:
        r = trainer.rollout
        line, r.obs, r.lstm_state = prior.clone(
            trainer.model,
            trainer.env,
            r.obs,
            r.lstm_state,
            torch.Generator().manual_seed(trainer.cfg.seed),
        )
        trainer.ctx.broadcast_parameters(trainer.model)  # every rank starts PPO from rank 0's clone
        if reporter is not None:
            reporter.tracker.write(line)
        return
    line, history = pretrain(
        trainer.model, trainer.env.market_windows, trainer.data, trainer.cfg, trainer.ctx
    )
    if reporter is not None and line is not None:
        reporter.tracker.write(line)
    elif reporter is not None:  # rank 0 writes the supervised losses into the run folder
        reporter.pretraining(trainer.run_dir, history)


def _updates(
    trainer: Trainer, reporter: Reporter | None, tracker: Tracker | None, stop: StopRequest
) -> bool:
    """Updates until the budget is spent; True when a stop request or early stop ended them."""
    cfg, t, main, n = trainer.cfg, trainer.cfg.train, trainer.ctx.is_main, trainer.progress
    if cfg.pretrain.enabled and n.update == 0:
        _start_point(trainer, reporter)
    said_paths = False
    while not trainer.budget.reached(trainer.progress):
        n = trainer.progress
        stop.next_update = n.update + 1
        stats, sums = trainer.train_step()
        failed = bool(stats["nonfinite"])
        early = False
        gathering = time.perf_counter()
        # every rank, every update, before rank 0 writes any checkpoint
        trainer.gather_rank_states()
        gathered_s = time.perf_counter() - gathering
        if main and not failed and not said_paths:
            # once a process: captures happen in its first update
            tracker.write(trainer.paths())
            said_paths = True
        # this update's, every rank: none may run inside a capture
        collectives = trainer.ctx.record.take()
        if main and not failed:
            b = trainer.boundary
            reporter.update(
                n.update,
                n.episodes,
                n.global_step,
                {
                    **stats,
                    **(
                        {f"collectives_{k}": v for k, v in collectives.items()}
                        if trainer.ctx.enabled
                        else {}
                    ),
                },
                sums,
                b.resources.host(),
                b.rank_gpus,
                b.gpu_notes,
            )
            if n.update % t.eval_every == 0:
                _evaluate_and_report(trainer, reporter)
                patience = t.early_stopping_patience
                early = patience > 0 and trainer.selection.evals_without_best >= patience
            saving = time.perf_counter()
            latest = trainer.save_checkpoints(periodic=n.update % cfg.output.checkpoint_every == 0)
            # What saving every update costs (the ranks' states gathered, then written): at
            # 65,536 copies a GPU it must stay small beside the update
            # (output.rank_state_every lowers it).
            reporter.checkpoint(
                n.update,
                n.global_step,
                gathered_s,
                time.perf_counter() - saving,
                latest,
                b.with_rank_states,
                stats["rollout_s"] + stats["update_s"],
            )
        agreed = agree(trainer.ctx, trainer.device, stop.requested, failed, early)
        if agreed.failed:
            saved = (
                f"latest.pt holds update {n.update}" if n.update else "no checkpoint was written"
            )
            raise TrainingFailure(
                f"the loss became NaN or infinite in update {n.update + 1}; {saved}; "
                "lower ppo.learning_rate or check the data for extreme values"
            )
        if agreed.stop_requested or agreed.early_stop:
            _save_rank_states(trainer)
            if main:
                why = (
                    "stop requested"
                    if agreed.stop_requested
                    else (
                        f"early stop: {t.early_stopping_patience} evaluations without "
                        "a new best composite"
                    )
                )
                tracker.write(f"{why}: latest.pt written at update {n.update}")
            return True
    return False


def _save_rank_states(trainer: Trainer) -> None:
    """Collective: the last update's latest.pt carries every rank's state, whatever
    output.rank_state_every says, so a resume after a finished or stopped run
    continues exactly."""
    if trainer.boundary.with_rank_states or trainer.progress.update == 0:
        return
    trainer.gather_rank_states(force=True)
    if trainer.ctx.is_main:
        trainer.save_checkpoints()


def _evaluate_and_report(trainer: Trainer, reporter: Reporter) -> None:
    metrics = trainer.evaluate()
    reporter.evaluation(
        trainer.progress.update,
        trainer.progress.global_step,
        metrics,
        trainer.selection.best.get("composite", math.nan),
    )
