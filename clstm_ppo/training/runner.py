"""The training loop of one worker: rollout -> GAE -> PPO update -> evaluate -> checkpoint.

Every rank runs this same loop on its own env copies; rank 0 alone evaluates,
logs and writes files. All collectives sit at fixed points of the loop, so
every rank makes the same number of them.
"""
from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch import nn

from clstm_ppo.agent import CascadedActorCritic, RolloutStorage, UpdatePaths, ppo_update, rollout
from clstm_ppo.agent.fused_rollout import FusedRollout
from clstm_ppo.agent.model import State
from clstm_ppo.agent.optimizer_step import OptimizerStep, fit_saved_state, make_adam, set_lr
from clstm_ppo.agent.ppo import lr_factor
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.static_update import StaticMinibatchLoss
from clstm_ppo.agent.storage import credit_settings
from clstm_ppo.backtest.policies import agent_policy
from clstm_ppo.backtest.scaled_rules import scaled_rule
from clstm_ppo.backtest.walk import selection_metrics, walk
from clstm_ppo.config import Config, check_values, first_line, save_config, to_dict
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.device import wait_for
from clstm_ppo.distributed import DistContext, TrainingFailure, rank_seeds
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv, Observation
from clstm_ppo.market.observed import observed_market_data
from clstm_ppo.pretraining.encoder import pretrain
from clstm_ppo.pretraining.rule_prior import RulePrior, pick_prior
from clstm_ppo.run_files.checkpoint import CheckpointError, CheckpointManager
from clstm_ppo.run_files.run_state import RankState, RunState
from clstm_ppo.run_files.tracking import Tracker
from clstm_ppo.training import rank_state as ranks
from clstm_ppo.training.monitor import ResourceMonitor
from clstm_ppo.training.plan import ExecutionPlan
from clstm_ppo.training.reporting import Reporter, describe, farewell
from clstm_ppo.training.selection import Selection
from clstm_ppo.training.stopping import StopRequest, agree


class Trainer:
    """One worker's run. ``wrap`` (the DDP wrapper, given by the launcher) is what the eager update trains
    through (the static update, with ``train.compile_loop``, averages its gradients itself and needs no wrapper);
    rollouts and checkpoints use the raw module, so DDP never enters a state_dict."""

    def __init__(self, cfg: Config, run_dir: Path, device: torch.device, ctx: DistContext = DistContext(),
                 resume: RunState | None = None, wrap: Callable[[nn.Module], nn.Module] | None = None):
        check_values(cfg)  # a config changed in code after it was built obeys the same rules
        self.cfg, self.run_dir, self.device, self.ctx = cfg, run_dir, device, ctx
        t, p = cfg.train, cfg.ppo
        self.plan = plan = ExecutionPlan.choose(cfg, device, ctx.world_size)
        normalizer = Normalizer.from_state_dict(resume.normalizer) if resume else None
        self.data = observed_market_data(cfg, normalizer)
        # Each rank its own streams; a resumed run whose env copies start afresh must not replay the first run's.
        seeds = rank_seeds(cfg.seed, ctx.rank, ctx.world_size, resume.update if resume else 0)
        # No per-episode records: the copies' episode figures are summed on the device, read once per update.
        # data.augment: generated underlyings join the training env's data only; self.data stays real for every
        # validation walk and the saved normaliser. The pool is sampled from the run's seed, so a resume rebuilds it.
        env_data, weights = self.data, None
        if cfg.data.augment > 0:
            from clstm_ppo.scenarios.augment import augmented_data  # the generators load only when asked

            env_data, weights = augmented_data(self.data, cfg)
        if cfg.agent.actions == "scale" and not cfg.agent.scale_rule:  # the training years' best, kept in the run's
            cfg.agent.scale_rule = pick_prior(self.data, cfg, device).name  # settings for evaluate and a resume
        # agent.actions scale: the copies take multiples of this rule's orders, its gate read on the env's bars; the
        # validation walks read it on the real ones.
        scaled = scaled_rule(cfg, env_data, device)
        self.walk_scaled = scaled_rule(cfg, self.data, device)
        self.env = BatchedOptionsEnv(env_data, "train", cfg.market, cfg.env, t.num_envs, device=device,
                                     seed=seeds.env, records=False,
                                     compile="on" if plan.env_step == "compiled" else "off",
                                     cuda_graphs=plan.rollout_graphs, symbol_weights=weights, scaled=scaled,
                                     slot_pnl=p.credit == "position")
        torch.manual_seed(cfg.seed)  # the same on every rank: identical initial weights
        self.model = CascadedActorCritic(len(self.data.feature_names), len(PORTFOLIO_FEATURES),
                                         self.env.actions.n, cfg.agent).to(device)
        if t.compile_encoder:
            # only the encoder (checkpoint keys unchanged): LSTM 2 runs in chunks cut at episode starts,
            # a shape that changes every rollout and would recompile
            self.model.encoder.compile()
        torch.manual_seed(seeds.torch)  # then each rank samples its own actions
        # The base rate (and its worker scaling) comes from this launch's settings, also on a resume.
        self.base_lr = p.learning_rate * (ctx.world_size if p.scale_lr_with_workers else 1)
        capture = plan.optimizer_step == "captured"
        self.optimizer = make_adam(self.model.parameters(), self.base_lr, p, capture_on=device if capture else None)
        self.batch_size = t.num_envs * p.num_steps * ctx.world_size  # env steps per update, all ranks
        self.planned_steps = self._planned_steps()
        self.planned_updates = max(1, math.ceil(self.planned_steps / self.batch_size))
        self.precision = Precision(device, t.precision)
        self.model.run_lstms_in_float32(self.precision.lstms_in_float32)
        self.storage = RolloutStorage(p.num_steps, t.num_envs, len(PORTFOLIO_FEATURES), self.env.actions.n, device,
                                      **credit_settings(cfg))
        if scaled is not None:  # the logged prior_nll reads -log pi(1x), the rule as it is, with or without a prior
            self.storage.prior_actions.fill_(scaled.one)
        # The parts the plan names: the whole decision (policy, draw, env, storage write) as one graph, and the
        # update's minibatch loss in fixed shapes, whose gradients are averaged without DDP's forward.
        self.fused = FusedRollout(self.model, self.env, self.storage, self.precision, plan.rollout_graphs) \
            if plan.rollout == "fused" else None
        self.static_loss = StaticMinibatchLoss(self.model, self.env.market_windows, self.storage, p, self.precision,
                                               cuda_graphs=plan.update_graphs) if plan.update == "static" else None
        self.train_model = wrap(self.model) if wrap is not None and plan.gradients == "ddp" else self.model
        if plan.gradients == "all_reduce":
            ctx.broadcast_parameters(self.model)  # as DDP's wrapping would: every rank starts from rank 0's weights
        self.minibatch_generator = torch.Generator().manual_seed(seeds.minibatches)
        # A prior from the rules: the rule a new run is cloned from, and the one whose penalty every update keeps.
        starts_from_rule = t.pretraining and t.pretrain_method == "rule" and not resume
        self.prior = RulePrior(self.data, cfg, device, env_data, scaled) if starts_from_rule or t.prior_kl > 0 \
            else None
        random.seed(seeds.numpy)
        np.random.seed(seeds.numpy)
        self.update, self.global_step, self.episodes = 0, 0, 0
        self.selection = Selection(window=t.selection_window)
        self.lstm_state = self.model.initial_state(t.num_envs, device)
        self.env_restored = False
        self.rollout_path = "eager"  # how the last rollout's decisions ran (agent/fused_rollout.py's path, or eager)
        self.saved_portfolio: torch.Tensor | None = None  # the restored copies' observed portfolio features
        self.other_ranks: list[RankState] = []  # ranks 1.. of the last update boundary, on rank 0
        self.with_rank_states = True  # whether the checkpoints of this update boundary carry the ranks' states
        self.resume_note = ""
        self.improved: tuple[str, ...] = ()  # metrics at a new best since the last checkpoint: their best_*.pt are due
        if resume:
            self._restore(resume)
            saved, now = (resume.world_size, resume.num_envs), (ctx.world_size, t.num_envs)
            why = ("the checkpoint was written between train.rank_state_every's saves" if not resume.ranks
                   else f"saved: {saved[0]} worker(s) x {saved[1]} copies; now {now[0]} x {now[1]}" if saved != now
                   else "the saved env state has another layout")
            self.resume_note = ("env copies continue their episodes" if self.env_restored
                                else f"env copies start fresh episodes ({why})")
        # Made after a resume loaded the optimizer's state: a captured step binds the tensors it holds then.
        self.optimizer_step = OptimizerStep(self.optimizer, p.max_grad_norm, capture) \
            if self.precision.scaler is None else None
        if not self.env_restored:
            self.obs = self.env.reset()
        elif self.saved_portfolio is not None:  # continuing copies observe what their last step returned
            self.obs = self.env.observation(self.saved_portfolio)
        else:  # a checkpoint from before the features were saved: observed afresh
            self.obs = self.env.observe()
        self.stop = StopRequest(announce=ctx.is_main)
        self.checkpoints = CheckpointManager(run_dir, t.keep_last)
        self.resources = ResourceMonitor(device)  # every rank reads its own GPU; rank 0 logs them all
        self.rank_gpus: list[dict[str, float]] = []  # every rank's GPU at the last update boundary, on rank 0
        self.gpu_notes: list[str] = []

    def describe(self) -> str:
        params = sum(p.numel() for p in self.model.parameters())
        return describe(self.cfg, self.run_dir, self.data, self.ctx.world_size, self.device, self.batch_size,
                        self.planned_updates, params)

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

    def rank_state(self) -> RankState:
        return ranks.capture(self.env, self.lstm_state, self.obs.portfolio, self.minibatch_generator, self.device)

    def gather_rank_states(self, force: bool = False) -> None:
        """Collective: rank 0 keeps every other rank's state of this update boundary for the checkpoints it writes,
        every ``train.rank_state_every`` updates (or when ``force``d)."""
        self.with_rank_states = force or self.update % self.cfg.train.rank_state_every == 0
        # Rank 0 takes its own state when it saves.
        others_send = self.ctx.enabled and not self.ctx.is_main and self.with_rank_states
        # As the file holds it (tensors and plain values): its tensors travel as one buffer, not pickled.
        sent = self.ctx.gather_to_main({"state": self.rank_state().to_file() if others_send else None,
                                        "gpu": self.resources.gpu(), "gpu_off": self.resources.off_reason},
                                       self.device)
        self.other_ranks = [RankState.from_file(one["state"], f"rank {r}.") for r, one in enumerate(sent[1:], 1)] \
            if self.with_rank_states else []
        self.rank_gpus = [one["gpu"] for one in sent]
        self.gpu_notes = [f"rank {r}: {one['gpu_off']}" for r, one in enumerate(sent) if one["gpu_off"]]

    def run_state(self) -> RunState:
        """What a checkpoint of this update boundary holds (run_files/run_state.py)."""
        return RunState(
            model=self.model.state_dict(), optimizer=self.optimizer.state_dict(),
            scaler=self.precision.state_dict(), update=self.update, global_step=self.global_step,
            episodes=self.episodes, config=to_dict(self.cfg), normalizer=self.data.normalizer.state_dict(),
            world_size=self.ctx.world_size, num_envs=self.cfg.train.num_envs, **self.selection.state_dict(),
            # rank 0's own, then ranks 1, 2, ...
            ranks=[self.rank_state(), *self.other_ranks] if self.with_rank_states else [])

    def _restore(self, state: RunState) -> None:
        try:
            self.model.load_state_dict(state.model)
        except RuntimeError as err:
            raise CheckpointError("checkpoint model does not fit these agent sizes "
                                  f"({first_line(err, 100)}); resume with the run's own config, or retrain if an "
                                  "older version wrote it (its actions or observed portfolio differ)") from None
        # This run's device settings, whichever device wrote it (a captured run's Adam cannot step on a CPU); its
        # saved rate is replaced at every update.
        self.optimizer.load_state_dict(fit_saved_state(state.optimizer, self.optimizer))
        self.precision.load_state_dict(state.scaler)
        self.update, self.global_step, self.episodes = state.update, state.global_step, state.episodes
        self.selection.load_state_dict(state.selection_state())
        # The env copies and random streams continue exactly when this run has the saved run's workers and copies;
        # otherwise (another world size, --num-envs or env layout) every copy starts afresh.
        mine = ranks.saved_for_this_rank(state, self.ctx, self.cfg.train.num_envs)
        carried = ranks.restore(mine, self.env, self.minibatch_generator, self.device) if mine else None
        if carried is not None:
            self.lstm_state, self.env_restored, self.saved_portfolio = carried, True, mine.portfolio

    # ------------------------------------------------------------------ one update

    def bar_codes(self) -> torch.Tensor | None:
        decisions = self.cfg.train.num_envs * self.cfg.ppo.num_steps
        return rollout.bar_codes(self.model, self.env.market_windows, decisions, self.precision)

    def policy(self, obs: Observation, codes: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, State]:
        return rollout.policy_step(self.model, obs, self.lstm_state, codes)

    def collect(self) -> np.ndarray:
        """One rollout into the storage, carrying the observation and LSTM state on; the sums of the full-length
        episodes that ended (``env.state.EPISODE_SUMS``)."""
        codes, p = self.bar_codes(), self.cfg.ppo
        if self.fused is not None and codes is not None:
            self.obs, self.lstm_state = self.fused.collect(self.obs, self.lstm_state, codes, p.gamma, p.gae_lambda)
            self.rollout_path = self.fused.path
        else:
            self.obs, self.lstm_state = rollout.collect(self.model, self.env, self.storage, self.obs, self.lstm_state,
                                                        self.precision, p, codes)
        return self.env.take_episode_sums()

    @property
    def optimizer_step_path(self) -> str:
        """How the update's clip and Adam step ran: "captured" or "eager" (always eager under fp16's scaler)."""
        return self.optimizer_step.path if self.optimizer_step is not None else "eager"

    def paths(self) -> str:
        """How the last update ran, in one line: what compiled, what replayed as CUDA graphs."""
        step = self.optimizer_step_path if self.optimizer_step is not None else "eager (fp16 scaler)"
        return (f"ran as: rollout {self.rollout_path}, env step {'compiled' if self.env.compiled else 'eager'}, "
                f"update {self.update_path}, optimizer step {step}, precision {self.precision.describe()}")

    @property
    def update_path(self) -> str:
        """How the update's minibatch loss ran: "graphs" (replayed as CUDA graphs), "compiled" or "eager"; "compiled"
        with a count where CUDA graphs were asked for and inductor compiled some of its graphs without them."""
        if self.static_loss is None:
            return "eager"
        if not self.static_loss.cuda_graphs:
            return "compiled"
        skips = self.static_loss.cudagraph_skips
        return f"compiled (graphs without CUDA graphs: {skips})" if skips else "graphs"

    def train_step(self) -> tuple[dict[str, float], np.ndarray]:
        """One rollout and update; returns the update's statistics and every rank's summed episode statistics."""
        started = time.perf_counter()
        finished = self.collect()
        wait_for(self.device)  # one sync per update, so the two timings split the work where it happened
        collected = time.perf_counter()
        stats = self.optimise()
        # The update's time includes waiting at its gradient all-reduces for the slowest rank.
        stats.update(rollout_s=collected - started, update_s=time.perf_counter() - collected)
        if stats["nonfinite"]:  # non-finite gradients or weights: this update is unsound and not saved
            return stats, np.zeros(0)
        self.update += 1
        self.global_step += self.batch_size
        sums = torch.as_tensor(finished, device=self.device)
        sums = self.ctx.all_reduce_sum(sums).cpu().numpy()  # every rank counts every rank's episodes
        self.episodes += int(sums[0])
        return stats, sums

    def optimise(self) -> dict[str, float]:
        """One PPO update on the stored rollout at this update's learning rate; the update's statistics."""
        lr = self.learning_rate()
        set_lr(self.optimizer, lr)  # into the rate tensor a captured step reads, if it is one
        mean = self.ctx.all_reduce_mean if self.ctx.enabled else None
        # The static loss trains the raw module (train_model is it), so its gradients are averaged here, not by DDP.
        average = partial(self.ctx.average_gradients, self.model) if self.plan.gradients == "all_reduce" else None
        coef = self.prior.fill(self.storage, self.global_step, self.planned_steps) if self.prior else 0.0
        stats = ppo_update(self.train_model, self.optimizer, self.storage, self.env.market_windows, self.cfg.ppo,
                           self.minibatch_generator, UpdatePaths(self.precision, self.static_loss, mean, average,
                                                                 self.optimizer_step))
        return {**stats, "learning_rate": lr, "prior_coef": coef}

    # ------------------------------------------------------------------ evaluation

    def evaluate(self) -> dict[str, float]:
        """Walk the validation split; each metric that reaches a new best gets its best_<metric>.pt with the
        update's next checkpoint (``improved``)."""
        self.model.eval()
        policy, state = agent_policy(self.model, len(self.data.symbols), self.device)
        metrics = selection_metrics(walk("agent", policy, state, self.data, "validation", self.cfg, self.device,
                                         self.walk_scaled))
        self.model.train()
        self.improved = tuple(dict.fromkeys((*self.improved, *self.selection.record(metrics))))
        return metrics

    def save_checkpoints(self, periodic: bool = False) -> Path:
        """latest.pt; with ``periodic`` also update_<n>.pt, and best_<metric>.pt of each metric improved since the
        last save: one write, the other files its other names (``CheckpointManager.save``)."""
        best, self.improved = self.improved, ()
        return self.checkpoints.save(self.run_state().to_file(), self.update if periodic else None, best)

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        cfg, t, main = self.cfg, self.cfg.train, self.ctx.is_main
        tracker, reporter = None, None
        if main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            save_config(cfg, self.run_dir / "config.yaml")
            total = t.total_steps if t.num_episodes <= 0 else None
            tracker = Tracker(self.run_dir, total, to_dict(cfg), t.wandb, t.wandb_project, self.run_dir.name,
                              initial_steps=self.global_step, tensorboard=t.tensorboard)
            reporter = Reporter(tracker, cfg, self.batch_size, self.ctx.world_size, self.device)
            tracker.write(self.describe())
            tracker.write(self.plan.describe())
            if self.resume_note:
                tracker.write(f"resumed at update {self.update}: {self.resume_note}")
        try:
            with self.stop.installed():
                stopped = self._loop(reporter, tracker)
            if not stopped:
                self._save_rank_states()
            if main and self.update % t.eval_every != 0 and not stopped:
                self._evaluate_and_report(reporter)
                self.save_checkpoints()
        finally:
            if tracker is not None:
                tracker.close()
        if main:
            farewell(self.run_dir, self.selection.best)

    def _loop(self, reporter: Reporter | None, tracker: Tracker | None) -> bool:
        """Updates until the budget is spent; True when a stop request or early stop ended them."""
        t, main = self.cfg.train, self.ctx.is_main
        if t.pretraining and self.update == 0 and self.prior is not None:
            line, self.obs, self.lstm_state = self.prior.clone(self.model, self.env, self.obs, self.lstm_state,
                                                               torch.Generator().manual_seed(self.cfg.seed))
            self.ctx.broadcast_parameters(self.model)  # every rank starts PPO from rank 0's clone
            if reporter is not None:
                reporter.tracker.write(line)
        elif t.pretraining and self.update == 0:
            line, history = pretrain(self.model, self.env.market_windows, self.data, self.cfg, self.ctx)
            if reporter is not None and line is not None:
                reporter.tracker.write(line)
            elif reporter is not None:  # rank 0 writes the supervised losses into the run folder
                reporter.pretraining(self.run_dir, history)
        said_paths = False
        while not self.budget_reached():
            self.stop.next_update = self.update + 1
            stats, sums = self.train_step()
            failed = bool(stats["nonfinite"])
            early = False
            gathering = time.perf_counter()
            self.gather_rank_states()  # every rank, every update, before rank 0 writes any checkpoint
            gathered_s = time.perf_counter() - gathering
            if main and not failed and not said_paths:  # once a process: captures happen in its first update
                tracker.write(self.paths())
                said_paths = True
            collectives = self.ctx.record.take()  # this update's, every rank: none may run inside a capture
            if main and not failed:
                reporter.update(self.update, self.episodes, self.global_step,
                                {**stats, **({f"collectives_{k}": v for k, v in collectives.items()}
                                             if self.ctx.enabled else {})},
                                sums, self.resources.host(), self.rank_gpus, self.gpu_notes)
                if self.update % t.eval_every == 0:
                    self._evaluate_and_report(reporter)
                    patience = t.early_stopping_patience
                    early = patience > 0 and self.selection.evals_without_best >= patience
                saving = time.perf_counter()
                latest = self.save_checkpoints(periodic=self.update % t.checkpoint_every == 0)
                # What saving every update costs (the ranks' states gathered, then written): at 65,536 copies a
                # GPU it must stay small beside the update (train.rank_state_every lowers it).
                reporter.checkpoint(self.update, self.global_step, gathered_s, time.perf_counter() - saving, latest,
                                    self.with_rank_states, stats["rollout_s"] + stats["update_s"])
            agreed = agree(self.ctx, self.device, self.stop.requested, failed, early)
            if agreed.failed:
                saved = f"latest.pt holds update {self.update}" if self.update else "no checkpoint was written"
                raise TrainingFailure(f"the loss became NaN or infinite in update {self.update + 1}; {saved}; "
                                      "lower ppo.learning_rate or check the data for extreme values")
            if agreed.stop_requested or agreed.early_stop:
                self._save_rank_states()
                if main:
                    why = "stop requested" if agreed.stop_requested else (
                        f"early stop: {t.early_stopping_patience} evaluations without a new best composite")
                    tracker.write(f"{why}: latest.pt written at update {self.update}")
                return True
        return False

    def _save_rank_states(self) -> None:
        """Collective: the last update's latest.pt carries every rank's state, whatever train.rank_state_every says,
        so a resume after a finished or stopped run continues exactly."""
        if self.with_rank_states or self.update == 0:
            return
        self.gather_rank_states(force=True)
        if self.ctx.is_main:
            self.save_checkpoints()

    def _evaluate_and_report(self, reporter: Reporter) -> None:
        metrics = self.evaluate()
        reporter.evaluation(self.update, self.global_step, metrics, self.selection.best.get("composite", math.nan))
