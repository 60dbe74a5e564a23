"""The training loop of one worker: rollout -> GAE -> PPO update -> evaluate -> checkpoint.

Every rank runs this same loop on its own env copies; rank 0 alone evaluates,
logs and writes files. All collectives sit at fixed points of the loop, so
every rank makes the same number of them.
"""
from __future__ import annotations

import math
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clstm_ppo.agent import CascadedActorCritic, RolloutStorage, ppo_update
from clstm_ppo.agent.model import State
from clstm_ppo.agent.ppo import lr_factor
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.pretrain import pretrain_encoder
from clstm_ppo.backtest.policies import agent_policy
from clstm_ppo.backtest.walk import selection_metrics, walk
from clstm_ppo.checkpoint import FORMAT, CheckpointError, CheckpointManager
from clstm_ppo.config import Config, first_line, save_config, to_dict
from clstm_ppo.data.dataset import build_market_data
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.device import wait_for
from clstm_ppo.distributed import DistContext, TrainingFailure, rank_seeds
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv, Observation
from clstm_ppo.metrics import BEST_METRICS, concat_episodes, episode_line, episode_sums, sums_to_metrics
from clstm_ppo.monitor import ResourceMonitor, per_rank_gpu
from clstm_ppo.tracking import Tracker

ENCODE_CHUNK = 4096  # windows per encoder call when caching bar codes: ~5 MB of input at TW 30


def compile_encoder(model: CascadedActorCritic) -> None:
    """``torch.compile`` LSTM 1 + MLP in place (checkpoint keys stay as they are).

    Only the encoder: LSTM 2 runs in chunks cut at episode starts, a shape that changes with
    every rollout and would recompile.
    """
    model.encoder.compile()


class Trainer:
    def __init__(self, cfg: Config, run_dir: Path, device: torch.device, ctx: DistContext = DistContext(),
                 resume: dict[str, Any] | None = None):
        self.cfg, self.run_dir, self.device, self.ctx = cfg, run_dir, device, ctx
        t, p = cfg.train, cfg.ppo
        normalizer = Normalizer.from_state_dict(resume["normalizer"]) if resume else None
        self.data = build_market_data(cfg.data, normalizer)
        # Each rank its own streams; a resumed run whose env copies start afresh must not replay the first run's.
        seeds = rank_seeds(cfg.seed, ctx.rank, ctx.world_size, resume["update"] if resume else 0)
        self.env = BatchedOptionsEnv(self.data, "train", cfg.market, cfg.env, t.num_envs, device=device,
                                     seed=seeds.env)
        torch.manual_seed(cfg.seed)  # the same on every rank: identical initial weights
        self.model = CascadedActorCritic(len(self.data.feature_names), len(PORTFOLIO_FEATURES),
                                         self.env.actions.n, cfg.agent).to(device)
        if t.compile:
            compile_encoder(self.model)
        torch.manual_seed(seeds.torch)  # then each rank samples its own actions
        self.train_model: torch.nn.Module = self.model  # the DDP wrapper, when there is one, trains through this
        # The base rate (and its worker scaling) comes from this launch's settings, also on a resume.
        self.base_lr = p.learning_rate * (ctx.world_size if p.scale_lr_with_workers else 1)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.base_lr, betas=tuple(p.adam_betas),
                                          eps=p.adam_eps)
        self.batch_size = t.num_envs * p.num_steps * ctx.world_size  # env steps per update, all ranks
        self.planned_steps = self._planned_steps()
        self.planned_updates = max(1, math.ceil(self.planned_steps / self.batch_size))
        self.precision = Precision(device, t.precision)
        self.model.run_lstms_in_float32(self.precision.lstms_in_float32)
        self.storage = RolloutStorage(p.num_steps, t.num_envs, len(PORTFOLIO_FEATURES), self.env.actions.n, device)
        self.minibatch_generator = torch.Generator().manual_seed(seeds.minibatches)
        random.seed(seeds.numpy)
        np.random.seed(seeds.numpy)
        self.update, self.global_step, self.episodes = 0, 0, 0
        self.best: dict[str, float] = {}
        self.last_eval: dict[str, float] = {}
        self.evals_without_best = 0
        self.lstm_state = self.model.initial_state(t.num_envs, device)
        self.env_restored = False
        self.other_ranks: list[dict[str, Any]] = []  # ranks 1.. of the last update boundary, on rank 0
        self.resume_note = ""
        if resume:
            self._restore(resume)
            saved, now = (resume["world_size"], resume["num_envs"]), (ctx.world_size, t.num_envs)
            why = (f"saved: {saved[0]} worker(s) x {saved[1]} copies; now {now[0]} x {now[1]}" if saved != now
                   else "the saved env state has another layout or another device's random stream")
            self.resume_note = ("env copies continue their episodes" if self.env_restored
                                else f"env copies start fresh episodes ({why})")
        self.obs = self.env.observe() if self.env_restored else self.env.reset()
        self.stop_requested = False
        self.checkpoints = CheckpointManager(run_dir, t.keep_last)
        self.resources = ResourceMonitor(device)  # every rank reads its own GPU; rank 0 logs them all
        self.rank_gpus: list[dict[str, float]] = []  # every rank's GPU at the last update boundary, on rank 0
        self.gpu_notes: list[str] = []
        self.gpu_notes_said: set[str] = set()

    def describe(self) -> str:
        """What is about to run, in four lines: where, on what data, on what hardware and budget, which agent."""
        cfg, t, d = self.cfg, self.cfg.train, self.data
        splits = " | ".join(f"{name} {first.date()}..{last.date()}" for name in ("train", "validation", "test")
                            for first, last in [d.split_dates(name)])
        workers = f"{self.ctx.world_size} worker(s) on {self.device.type}"
        if self.device.type == "cpu":
            workers += f" ({torch.get_num_threads()} thread(s) each)"
        budget = (f"{t.num_episodes:,} episodes" if t.num_episodes > 0 else f"{t.total_steps:,} env steps")
        params = sum(p.numel() for p in self.model.parameters())
        a = cfg.agent
        return "\n".join([
            f"run {self.run_dir.name} -> {self.run_dir}",
            f"data {cfg.data.source}: {', '.join(d.symbols)}, {len(d.dates):,} bars; {splits}",
            f"{workers}; {t.num_envs} env copies x {cfg.ppo.num_steps} steps each = {self.batch_size:,} env steps "
            f"per update; budget {budget} (~{self.planned_updates:,} updates)",
            f"agent: LSTM 1 {a.lstm1_hidden}, MLP {a.mlp_hidden}, LSTM 2 {a.lstm2_hidden}, {params:,} parameters; "
            f"{t.precision}; learning rate {cfg.ppo.learning_rate:g} {cfg.ppo.lr_schedule}",
        ])

    # ------------------------------------------------------------------ budget

    def _planned_steps(self) -> int:
        """The env-step budget the learning rate decays over (num_episodes: estimated at full length)."""
        t = self.cfg.train
        steps = t.num_episodes * max(self.env.max_len, 1) if t.num_episodes > 0 else t.total_steps
        return max(1, steps)

    def learning_rate(self) -> float:
        """This update's learning rate: the launch's base rate by the warm-up and the env-step schedule."""
        return self.base_lr * lr_factor(self.update, self.global_step, self.planned_steps, self.cfg.ppo)

    def budget_reached(self) -> bool:
        t = self.cfg.train
        if t.num_episodes > 0:
            return self.episodes >= t.num_episodes
        return self.global_step >= t.total_steps

    # ------------------------------------------------------------------ state

    def rank_state(self) -> dict[str, Any]:
        """What differs between ranks: random streams, env copies and LSTM 2's carried state."""
        rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
               "minibatches": self.minibatch_generator.get_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return {"rng": rng, "env": self.env.state_dict(), "lstm_state": tuple(s.cpu() for s in self.lstm_state)}

    def gather_rank_states(self) -> None:
        """Collective: rank 0 keeps every other rank's state of this update boundary for the checkpoints it writes."""
        others_send = self.ctx.enabled and not self.ctx.is_main  # rank 0 takes its own state when it saves
        sent = self.ctx.gather_to_main({"state": self.rank_state() if others_send else None,
                                        "gpu": self.resources.gpu(), "gpu_off": self.resources.off_reason})
        self.other_ranks = [one["state"] for one in sent[1:]]
        self.rank_gpus = [one["gpu"] for one in sent]
        self.gpu_notes = [f"rank {r}: {one['gpu_off']}" for r, one in enumerate(sent) if one["gpu_off"]]

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            "scaler": self.precision.state_dict(),
            "update": self.update, "global_step": self.global_step, "episodes": self.episodes,
            **self.rank_state(), "other_ranks": list(self.other_ranks),  # rank 0's own, then ranks 1, 2, ...
            "config": to_dict(self.cfg), "normalizer": self.data.normalizer.state_dict(),
            "world_size": self.ctx.world_size, "num_envs": self.cfg.train.num_envs,
            "best": dict(self.best), "last_eval": dict(self.last_eval), "evals_without_best": self.evals_without_best,
        }

    def _restore(self, state: dict[str, Any]) -> None:
        try:
            self.model.load_state_dict(state["model"])
        except RuntimeError as err:
            raise CheckpointError("checkpoint model does not fit these agent sizes "
                                  f"({first_line(err, 100)}); resume with the run's own config, or retrain if an "
                                  "older version wrote it (its actions or observed portfolio differ)") from None
        self.optimizer.load_state_dict(state["optimizer"])  # its saved rate is replaced at every update
        self.precision.load_state_dict(state.get("scaler"))
        self.update, self.global_step, self.episodes = state["update"], state["global_step"], state["episodes"]
        self.best, self.last_eval = dict(state["best"]), dict(state.get("last_eval", {}))
        self.evals_without_best = state.get("evals_without_best", 0)
        # The env copies and random streams continue exactly when this run has the saved run's workers and copies;
        # otherwise (another world size, --num-envs or env layout) every copy starts afresh.
        mine = self._saved_rank_state(state)
        if mine is not None and self.env.fits(mine["env"]):
            rng = mine["rng"]
            torch.set_rng_state(rng["torch"])
            if "cuda" in rng and self.device.type == "cuda":
                torch.cuda.set_rng_state(rng["cuda"], self.device)
            np.random.set_state(rng["numpy"])
            random.setstate(rng["python"])
            self.minibatch_generator.set_state(rng["minibatches"])
            self.env.load_state_dict(mine["env"])
            self.lstm_state = tuple(s.to(self.device) for s in mine["lstm_state"])
            self.env_restored = True

    def _saved_rank_state(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """This rank's saved random streams and env copies, when the checkpoint's workers and copies match."""
        world, others = self.ctx.world_size, state.get("other_ranks", [])
        if state["world_size"] != world or state["num_envs"] != self.cfg.train.num_envs or len(others) != world - 1:
            return None  # also a multi-worker checkpoint from before ranks > 0 were saved
        return state if self.ctx.rank == 0 else others[self.ctx.rank - 1]

    # ------------------------------------------------------------------ one update

    @torch.no_grad()
    def collect(self) -> dict[str, np.ndarray]:
        s, obs = self.storage, self.obs
        s.initial_state = tuple(x.clone() for x in self.lstm_state)
        codes = self.bar_codes()
        finished = []
        for step in range(self.cfg.ppo.num_steps):
            with self.precision.autocast():
                logits, value, state = self.policy(obs, codes)
            self.lstm_state = tuple(x.float() for x in state)  # the carried state stays float32 under autocast
            dist = torch.distributions.Categorical(logits=logits[0], validate_args=False)  # checks sync the host
            action = dist.sample()
            result = self.env.step(action)
            s.add(step, obs, action, dist.log_prob(action), value[0], result.reward,
                  result.terminated | result.truncated)
            obs = result.obs
            if result.episodes is not None:
                finished.append(result.episodes)
        # Bootstrap from the next observation without advancing the carried state.
        with self.precision.autocast():
            _, last_value, _ = self.policy(obs, codes)
        s.finish(last_value[0].float(), self.cfg.ppo.gamma, self.cfg.ppo.gae_lambda)
        self.obs = obs
        return concat_episodes(finished)

    def bar_codes(self) -> torch.Tensor | None:
        """LSTM 1 + MLP codes of every observable training bar, by flat row; None when that costs more.

        The encoder sees a bar's window and nothing else, and the weights are fixed during a rollout, so
        each bar needs encoding once per rollout, not once per copy and step: in a few large batches
        instead of num_steps small ones, and with no window gathered per step. Worth it while the split
        has no more bars than the rollout has decisions (the embedded S&P 500 and the synthetic default).
        """
        windows = self.env.market_windows
        rows = windows.observable_rows()
        if len(rows) > self.cfg.train.num_envs * self.cfg.ppo.num_steps:
            return None
        codes = torch.zeros(windows.n_symbols * windows.n_bars, self.cfg.agent.mlp_hidden, device=self.device)
        with self.precision.autocast():
            for chunk in rows.split(ENCODE_CHUNK):
                codes[chunk] = self.model.encoder(windows.gather(chunk)).float()
        return codes

    def policy(self, obs: Observation, codes: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, State]:
        """The rollout's forward for one step of every copy, from cached bar codes when there are some."""
        args = (obs.portfolio[None], obs.mask[None], obs.start[None], self.lstm_state)
        if codes is None:
            return self.model(obs.market[None], *args)
        return self.model.decide(codes.index_select(0, obs.row)[None], *args)

    def train_step(self) -> tuple[dict[str, float], np.ndarray]:
        """One rollout and update; returns the update's statistics and every rank's summed episode statistics."""
        started = time.perf_counter()
        episodes = self.collect()
        wait_for(self.device)  # one sync per update, so the two timings split the work where it happened
        collected = time.perf_counter()
        mean = self.ctx.all_reduce_mean if self.ctx.enabled else None
        lr = self.learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        stats = ppo_update(self.train_model, self.optimizer, self.storage, self.env.market_windows, self.cfg.ppo,
                           self.minibatch_generator, mean, self.precision)
        # The update's time includes waiting at its gradient all-reduces for the slowest rank.
        stats.update(rollout_s=collected - started, update_s=time.perf_counter() - collected)
        # A step can also overflow the weights themselves; then this update is unsound and not saved.
        weights_ok = bool(torch.stack([p.isfinite().all() for p in self.model.parameters()]).all())
        if stats["nonfinite"] or not weights_ok:
            return {**stats, "nonfinite": 1.0}, np.zeros(0)
        self.update += 1
        self.global_step += self.batch_size
        sums = torch.as_tensor(episode_sums(episodes), device=self.device)
        sums = self.ctx.all_reduce_sum(sums).cpu().numpy()  # every rank counts every rank's episodes
        self.episodes += int(sums[0])
        stats["learning_rate"] = lr
        return stats, sums

    # ------------------------------------------------------------------ evaluation and files

    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        policy, state = agent_policy(self.model, len(self.data.symbols), self.device)
        metrics = selection_metrics(walk("agent", policy, state, self.data, "validation", self.cfg, self.device))
        self.model.train()
        self.last_eval = metrics
        if metrics["composite"] > self.best.get("composite", float("-inf")):
            self.evals_without_best = 0
        else:
            self.evals_without_best += 1
        state = None
        for name in BEST_METRICS:
            if name not in self.best or metrics[name] > self.best[name]:
                self.best[name] = metrics[name]
                state = state or self.state_dict()
                state["best"] = dict(self.best)
                self.checkpoints.save_best(state, name)
        return metrics

    def _request_stop(self, signum, frame) -> None:  # noqa: ARG002 (signal handler signature)
        if self.ctx.is_main and not self.stop_requested:  # once: Ctrl-C reaches workers and launcher alike
            print(f"\n{signal.Signals(signum).name}: stopping after update {self.update + 1} is finished and "
                  "saved to latest.pt (the checkpoints are never left half-written, so kill -9 is safe too)",
                  file=sys.stderr, flush=True)
        self.stop_requested = True

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        cfg, main = self.cfg, self.ctx.is_main
        tracker = None
        if main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            save_config(cfg, self.run_dir / "config.yaml")
            total = cfg.train.total_steps if cfg.train.num_episodes <= 0 else None
            tracker = Tracker(self.run_dir, total, to_dict(cfg), cfg.train.wandb, cfg.train.wandb_project,
                              self.run_dir.name, initial_steps=self.global_step, tensorboard=cfg.train.tensorboard)
            tracker.write(self.describe())
            if self.resume_note:
                tracker.write(f"resumed at update {self.update}: {self.resume_note}")
        previous = {sig: signal.signal(sig, self._request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            if cfg.train.pretraining and self.update == 0:
                self._pretrain(tracker)
            stopped = False
            while not self.budget_reached():
                stats, sums = self.train_step()
                failed = bool(stats["nonfinite"])
                early = False
                self.gather_rank_states()  # every rank, every update, before rank 0 writes any checkpoint
                if main and not failed:
                    self._report(tracker, stats, sums)
                    if self.update % cfg.train.eval_every == 0:
                        self._report_eval(tracker, self.evaluate())
                        patience = cfg.train.early_stopping_patience
                        early = patience > 0 and self.evals_without_best >= patience
                    if self.update % cfg.train.checkpoint_every == 0:
                        self.checkpoints.save_periodic(self.state_dict(), self.update)
                    self.checkpoints.save_latest(self.state_dict())
                # One collective a step: every rank learns of any rank's stop request or failure, and of
                # rank 0's early stop, at the same update boundary, so no rank waits for one that has left.
                flags = self.ctx.all_reduce_sum(torch.tensor(
                    [float(self.stop_requested), float(failed), float(early)], device=self.device)).tolist()
                if flags[1]:
                    saved = f"latest.pt holds update {self.update}" if self.update else "no checkpoint was written"
                    raise TrainingFailure(f"the loss became NaN or infinite in update {self.update + 1}; {saved}; "
                                          "lower ppo.learning_rate or check the data for extreme values")
                if flags[0] or flags[2]:
                    stopped = True
                    if main:
                        why = "stop requested" if flags[0] else (
                            f"early stop: {cfg.train.early_stopping_patience} evaluations without a new best composite")
                        tracker.write(f"{why}: latest.pt written at update {self.update}")
                    break
            if main and self.update % cfg.train.eval_every != 0 and not stopped:
                self._report_eval(tracker, self.evaluate())
                self.checkpoints.save_latest(self.state_dict())
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if tracker is not None:
                tracker.close()
        if main:
            self._farewell()

    def _pretrain(self, tracker: Tracker | None) -> None:
        history = pretrain_encoder(self.model.encoder, self.env.market_windows, self.data, self.cfg.train,
                                   torch.Generator().manual_seed(self.cfg.seed))
        self.ctx.broadcast_parameters(self.model)  # GPU kernels need not be bitwise deterministic across ranks
        if tracker is None:
            return
        lines = ["pretraining LSTM 1 (next-bar return, training split):"]
        lines += [f"  epoch {h['epoch']}: mse {h['mse']:.4f} (predict-zero {h['predict_zero_mse']:.4f})" for h in history]
        tracker.write("\n".join(lines))
        with open(self.run_dir / "pretrain_loss.csv", "w") as fh:
            fh.write("epoch,mse,predict_zero_mse\n")
            fh.writelines(f"{h['epoch']},{h['mse']},{h['predict_zero_mse']}\n" for h in history)
        for h in history:
            tracker.log("pretrain", 0, h)

    def _report(self, tracker: Tracker, stats: dict[str, float], sums: np.ndarray) -> None:
        postfix = {"upd": str(self.update), "ep": str(self.episodes)}
        if sums[0] > 0:
            m = sums_to_metrics(sums)
            postfix.update(ep=str(self.episodes), ret=f"{m['return_pct']:+.2f}%", win=f"{m['win_rate']:.0%}")
            suffix = ""
            if self.ctx.enabled:
                suffix = (f"GPUs: {self.ctx.world_size}" if self.device.type == "cuda"
                          else f"workers: {self.ctx.world_size}")
            total = self.cfg.train.num_episodes or None
            tracker.write(episode_line(self.episodes, total, m, suffix))
            tracker.log("train_episodes", self.global_step, m)
        for note in self.gpu_notes:  # each rank's reason for turning GPU monitoring off, said once
            if note not in self.gpu_notes_said:
                tracker.write(note)
                self.gpu_notes_said.add(note)
        tracker.log("update", self.global_step,
                    {"update": self.update, **stats, **self.resources.host(), **per_rank_gpu(self.rank_gpus)})
        tracker.progress(self.batch_size, postfix)

    def _report_eval(self, tracker: Tracker, m: dict[str, float]) -> None:
        tracker.write(f"eval @ update {self.update} (validation walk, {m['steps']:.0f} bars): "
                      f"return {m['return_pct']:+.2f}%, Sharpe {m['sharpe']:.2f}, "
                      f"win rate {m['win_rate']:.1%}, profit rate {m['profit_rate']:.1%}, "
                      f"composite {m['composite']:.3f} (best {self.best.get('composite', float('nan')):.3f})")
        tracker.log("eval", self.global_step, m)

    def _farewell(self) -> None:
        print(f"\nrun folder: {self.run_dir}")
        for name in BEST_METRICS:
            path = self.run_dir / f"best_{name}.pt"
            if path.exists():
                print(f"  best {name:<11} {self.best[name]:>9.4f}  {path}")
        print(f"  latest            {self.run_dir / 'latest.pt'}")
        print(f"resume with: python -m clstm_ppo.train --run-name {self.run_dir.name} "
              f"--checkpoint-dir {self.run_dir.parent} --resume-from latest   (or composite, win_rate, ...)")
        print(f"backtest on the held-out test split, against buy-and-hold, cash, random and two option rules:\n"
              f"  python -m clstm_ppo.evaluate --checkpoint {self.run_dir / 'best_composite.pt'} --split test "
              f"--plot {self.run_dir / 'test_equity.png'} --json {self.run_dir / 'test_report.json'}\n"
              "(the best validation score is optimistic: it is the maximum over many evaluations of one split)")
