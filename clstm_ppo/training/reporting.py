"""What rank 0 tells the user and the trackers during a run: the set-up, each update, each
evaluation, the pretraining curve and where the files are at the end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from clstm_ppo.config import Config
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.metrics import episode_line, sums_to_metrics
from clstm_ppo.run_files.checkpoint import BEST_METRICS
from clstm_ppo.run_files.tracking import Tracker
from clstm_ppo.training.monitor import per_rank_gpu

# What each agent kind is made of (agent/model.py), for the start-up line.
LAYERS = {
    "clstm": "LSTM 1 {a.lstm1_hidden}, MLP {a.mlp_hidden}, LSTM 2 {a.lstm2_hidden}",
    "lstm": "current bar -> linear {a.mlp_hidden}, LSTM 2 {a.lstm2_hidden}",
    "mlp": "current bar -> linear {a.mlp_hidden}, 2 tanh layers of {a.mlp_core_hidden}",
}


def describe(
    cfg: Config,
    run_dir: Path,
    data: MarketData,
    world_size: int,
    device: torch.device,
    batch_size: int,
    planned_updates: int,
    params: int,
) -> str:
    """What is about to run, in five lines: where, on what data, on what hardware and
    budget, which agent, what it chooses."""
    t, a = cfg.train, cfg.agent
    splits = " | ".join(
        f"{name} {first.date()}..{last.date()}"
        for name in ("train", "validation", "test")
        for first, last in [data.split_dates(name)]
    )
    # e.g. "12,419 bars of 1 h, 24/5, 24 a day: 6,240 bars a year, from the data"
    bars = f"{len(data.dates):,} {data.clock.describe()}"
    workers = f"{world_size} worker(s) on {device.type}"
    if device.type == "cpu":
        workers += f" ({torch.get_num_threads()} thread(s) each)"
    budget = (
        f"{t.num_episodes:,} episodes" if t.num_episodes > 0 else f"{t.total_steps:,} env steps"
    )
    # the rule a scale agent times is the run's first question: which rule did it pick?
    choices = (
        f"{', '.join(f'{m:g}' for m in a.scale_multiples)} x {a.scale_rule}"
        if a.actions == "scale"
        else "an order of the chain, a stock target or a close"
    )
    return "\n".join(
        [
            f"run {run_dir.name} -> {run_dir}",
            f"data {cfg.data.source}: {', '.join(data.symbols)}, {bars}; {splits}",
            f"{workers}; {t.num_envs} env copies x {cfg.ppo.num_steps} steps each = {batch_size:,} "
            f"env steps per update; budget {budget} (~{planned_updates:,} updates)",
            f"agent {a.kind}: {LAYERS[a.kind].format(a=a)}, {params:,} parameters; "
            f"{cfg.launch.precision}; learning rate {cfg.ppo.learning_rate:g} "
            f"{cfg.ppo.lr_schedule}",
            f"actions {a.actions}: {choices}; credit {cfg.ppo.credit}",
        ]
    )


# a checkpoint costing more than this share of an update's time is worth a note
CHECKPOINT_SHARE = 0.2


class Reporter:
    """Rank 0's console lines and tracker records; says each rank's GPU-monitoring note once."""

    def __init__(
        self, tracker: Tracker, cfg: Config, batch_size: int, world_size: int, device: torch.device
    ):
        self.tracker, self.cfg, self.batch_size = tracker, cfg, batch_size
        self.world_size, self.device = world_size, device
        self.notes_said: set[str] = set()

    def update(
        self,
        update: int,
        episodes: int,
        global_step: int,
        stats: dict[str, float],
        sums: np.ndarray,
        host: dict[str, float],
        rank_gpus: list[dict[str, float]],
        gpu_notes: list[str],
    ) -> None:
        postfix = {"upd": str(update), "ep": str(episodes)}
        if sums[0] > 0:
            m = sums_to_metrics(sums)
            postfix.update(ret=f"{m['return_pct']:+.2f}%", win=f"{m['win_rate']:.0%}")
            suffix = ""
            if self.world_size > 1:
                suffix = (
                    f"GPUs: {self.world_size}"
                    if self.device.type == "cuda"
                    else f"workers: {self.world_size}"
                )
            self.tracker.write(
                episode_line(episodes, self.cfg.train.num_episodes or None, m, suffix)
            )
            self.tracker.log("train_episodes", global_step, m)
        for note in gpu_notes:  # each rank's reason for turning GPU monitoring off, said once
            if note not in self.notes_said:
                self.tracker.write(note)
                self.notes_said.add(note)
        self.tracker.log(
            "update", global_step, {"update": update, **stats, **host, **per_rank_gpu(rank_gpus)}
        )
        self.tracker.progress(self.batch_size, postfix)

    def checkpoint(
        self,
        update: int,
        global_step: int,
        gather_s: float,
        save_s: float,
        latest: Path,
        with_rank_states: bool,
        trained_s: float,
    ) -> None:
        """The per-update checkpoint's cost: the ranks' states gathered to rank 0, then
        written (periodic and latest), and latest.pt's size; said once where it outweighs a
        fifth of the update's ``trained_s`` (rollout and PPO update) while every checkpoint
        carries the ranks' states."""
        size_mb = latest.stat().st_size / 1e6
        self.tracker.log(
            "checkpoint",
            global_step,
            {
                "update": update,
                "gather_s": gather_s,
                "save_s": save_s,
                "latest_mb": size_mb,
                "rank_states": with_rank_states,
            },
        )
        spent = gather_s + save_s
        if (
            "checkpoint" not in self.notes_said
            and update > 1
            and self.cfg.output.rank_state_every == 1
            and spent > CHECKPOINT_SHARE * trained_s
        ):  # once a run, whatever the figures
            self.notes_said.add("checkpoint")
            self.tracker.write(
                f"each checkpoint takes {spent:.1f} s to gather and write {size_mb:,.0f} MB (every "
                f"rank's env copies and LSTM 2 state with it) against {trained_s:.1f} s of rollout "
                "and update: --set output.rank_state_every=10 carries them every 10th update only "
                "(the last one always)"
            )

    def evaluation(
        self, update: int, global_step: int, m: dict[str, float], best_composite: float
    ) -> None:
        self.tracker.write(
            f"eval @ update {update} (validation walk, {m['steps']:.0f} bars): "
            f"return {m['return_pct']:+.2f}%, Sharpe {m['sharpe']:.2f}, "
            f"win rate {m['win_rate']:.1%}, profit rate {m['profit_rate']:.1%}, "
            f"composite {m['composite']:.3f} (best {best_composite:.3f})"
        )
        self.tracker.log("eval", global_step, m)

    def pretraining(self, run_dir: Path, history: list[dict[str, float]]) -> None:
        lines = ["pretraining LSTM 1 (next-bar return, training split):"]
        lines += [
            f"  epoch {h['epoch']}: mse {h['mse']:.4f} (predict-zero {h['predict_zero_mse']:.4f})"
            for h in history
        ]
        self.tracker.write("\n".join(lines))
        with open(run_dir / "pretrain_loss.csv", "w") as fh:
            fh.write("epoch,mse,predict_zero_mse\n")
            fh.writelines(f"{h['epoch']},{h['mse']},{h['predict_zero_mse']}\n" for h in history)
        for h in history:
            self.tracker.log("pretrain", 0, h)


def farewell(run_dir: Path, best: dict[str, float]) -> None:
    """Where the files are, how to resume, and the backtest to run next."""
    print(f"\nrun folder: {run_dir}")
    for name in BEST_METRICS:
        path = run_dir / f"best_{name}.pt"
        if path.exists() and name in best:
            # a run resumed from an early checkpoint may not have reached it yet
            print(f"  best {name:<18} {best[name]:>9.4f}  {path}")
    print(f"  latest                   {run_dir / 'latest.pt'}")
    print(
        f"resume with: python -m clstm_ppo.train --run-name {run_dir.name} "
        f"--checkpoint-dir {run_dir.parent} --resume-from latest   (or composite, win_rate, ...)"
    )
    print(
        "backtest on the held-out test split, against buy-and-hold, cash, random and two option "
        f"rules:\n  python -m clstm_ppo.evaluate --checkpoint {run_dir / 'best_composite.pt'} "
        f"--split test --plot {run_dir / 'test_equity.png'} --json {run_dir / 'test_report.json'}\n"
        "(the best validation score is optimistic: it is the maximum over many "
        "evaluations of one split)"
    )
