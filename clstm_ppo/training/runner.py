"""One worker's trainer: the env copies, the model, the rollout and the update its plan names, the
run's counters, and the state its checkpoints hold and a resume puts back.

The loop that drives them is training/loop.py. Every rank builds the same pieces on its own env
copies; rank 0 alone evaluates, logs and writes files.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from clstm_ppo.agent import ActorCritic, RolloutStorage
from clstm_ppo.agent.optimizer_step import fit_saved_state, make_adam
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.storage import credit_settings
from clstm_ppo.backtest.policies import agent_policy
from clstm_ppo.backtest.scaled_rules import scaled_rule
from clstm_ppo.backtest.walk import selection_metrics, walk
from clstm_ppo.config import Config, check_values, first_line, to_dict
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.device import wait_for
from clstm_ppo.distributed import DistContext, rank_seeds
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv
from clstm_ppo.market.observed import observed_market_data
from clstm_ppo.pretraining.rule_prior import RulePrior, pick_prior
from clstm_ppo.run_files.checkpoint import CheckpointError
from clstm_ppo.run_files.run_state import RankState, RunState
from clstm_ppo.training import rank_state as ranks
from clstm_ppo.training.budget import Budget, Progress
from clstm_ppo.training.loop import run
from clstm_ppo.training.plan import ExecutionPlan
from clstm_ppo.training.rank_state import Boundary
from clstm_ppo.training.reporting import describe
from clstm_ppo.training.rollout_phase import Rollout
from clstm_ppo.training.selection import Selection
from clstm_ppo.training.update_phase import Update


class Trainer:
    """One worker's run: the rollout and the update the plan names, the run's counters and its
    files. ``wrap`` (the DDP wrapper, given by the launcher) is what the eager update trains through
    (the static update, with ``launch.compile_loop``, averages its gradients itself and needs no
    wrapper); rollouts and checkpoints use the raw module, so DDP never enters a state_dict."""

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        device: torch.device,
        ctx: DistContext = DistContext(),
        resume: RunState | None = None,
        wrap: Callable[[nn.Module], nn.Module] | None = None,
    ):
        check_values(cfg)  # a config changed in code after it was built obeys the same rules
        self.cfg, self.run_dir, self.device, self.ctx = cfg, run_dir, device, ctx
        t, p = cfg.train, cfg.ppo
        self.plan = plan = ExecutionPlan.choose(cfg, device, ctx.world_size)
        normalizer = Normalizer.from_state_dict(resume.normalizer) if resume else None
        self.data = observed_market_data(cfg, normalizer)
        # Each rank its own streams; a resumed run whose env copies start afresh
        # must not replay the first run's.
        seeds = rank_seeds(cfg.seed, ctx.rank, ctx.world_size, resume.update if resume else 0)
        # No per-episode records: the copies' episode figures are summed on the device, read once
        # per update. data.augment: generated underlyings join the training env's data only;
        # self.data stays real for every validation walk and the saved normaliser. The pool is
        # sampled from the run's seed, so a resume rebuilds it.
        env_data, weights = self.data, None
        if cfg.data.augment > 0:
            # the generators load only when asked
            from clstm_ppo.scenarios.augment import augmented_data

            env_data, weights = augmented_data(self.data, cfg)
        if cfg.agent.actions == "scale" and not cfg.agent.scale_rule:
            # the training years' best, kept in the run's settings for evaluate and a resume
            cfg.agent.scale_rule = pick_prior(self.data, cfg, device).name
        # agent.actions scale: the copies take multiples of this rule's orders, its gate read on the
        # env's bars; the validation walks read it on the real ones.
        scaled = scaled_rule(cfg, env_data, device)
        self.walk_scaled = scaled_rule(cfg, self.data, device)
        self.env = BatchedOptionsEnv(
            env_data,
            "train",
            cfg.market,
            cfg.env,
            t.num_envs,
            device=device,
            seed=seeds.env,
            records=False,
            compile="on" if plan.env_step == "compiled" else "off",
            cuda_graphs=plan.rollout_graphs,
            symbol_weights=weights,
            scaled=scaled,
            slot_pnl=p.credit == "position",
        )
        torch.manual_seed(cfg.seed)  # the same on every rank: identical initial weights
        self.model = ActorCritic(
            len(self.data.feature_names), len(PORTFOLIO_FEATURES), self.env.actions.n, cfg.agent
        ).to(device)
        if cfg.launch.compile_encoder:
            # only the encoder (checkpoint keys unchanged): LSTM 2 runs in chunks cut at episode
            # starts, a shape that changes every rollout and would recompile
            self.model.encoder.compile()
        torch.manual_seed(seeds.torch)  # then each rank samples its own actions
        # The base rate (and its worker scaling) comes from this
        # launch's settings, also on a resume.
        self.budget = Budget.of(cfg, ctx.world_size, self.env.max_len)
        optimizer = make_adam(
            self.model.parameters(),
            self.budget.base_lr,
            p,
            capture_on=device if plan.optimizer_step == "captured" else None,
        )
        precision = Precision(device, cfg.launch.precision)
        self.model.run_lstms_in_float32(precision.lstms_in_float32)
        storage = RolloutStorage(
            p.num_steps,
            t.num_envs,
            len(PORTFOLIO_FEATURES),
            self.env.actions.n,
            device,
            **credit_settings(cfg),
        )
        if scaled is not None:
            # the logged prior_nll reads -log pi(1x), the rule as it is, with or without a prior
            storage.prior_actions.fill_(scaled.one)
        train_model = (
            wrap(self.model) if wrap is not None and plan.gradients == "ddp" else self.model
        )
        if plan.gradients == "all_reduce":
            # as DDP's wrapping would: every rank starts from rank 0's weights
            ctx.broadcast_parameters(self.model)
        minibatches = torch.Generator().manual_seed(seeds.minibatches)
        # A prior from the rules: the rule a new run is cloned from, and the one
        # whose penalty every update keeps.
        starts_from_rule = cfg.pretrain.enabled and cfg.pretrain.method == "rule" and not resume
        prior = (
            RulePrior(self.data, cfg, device, env_data, scaled)
            if starts_from_rule or cfg.prior.kl > 0
            else None
        )
        random.seed(seeds.numpy)
        np.random.seed(seeds.numpy)
        self.progress = Progress()
        self.selection = Selection(window=t.selection_window)
        self.resume_note, carried = "", None
        if resume:
            carried = self._restore(resume, optimizer, precision, minibatches)
            saved, now = (resume.world_size, resume.num_envs), (ctx.world_size, t.num_envs)
            why = (
                "the checkpoint was written between output.rank_state_every's saves"
                if not resume.ranks
                else f"saved: {saved[0]} worker(s) x {saved[1]} copies; now {now[0]} x {now[1]}"
                if saved != now
                else "the saved env state has another layout"
            )
            self.resume_note = (
                "env copies continue their episodes"
                if carried
                else f"env copies start fresh episodes ({why})"
            )
        self.ppo_update = Update(
            self.model,
            train_model,
            optimizer,
            storage,
            self.env,
            precision,
            plan,
            cfg,
            ctx,
            minibatches,
            prior,
        )
        if carried is None:
            obs, lstm_state = self.env.reset(), self.model.initial_state(t.num_envs, device)
        elif carried.portfolio is not None:
            # continuing copies observe what their last step returned
            obs, lstm_state = self.env.observation(carried.portfolio), carried.lstm_state
        else:  # a checkpoint from before the features were saved: observed afresh
            obs, lstm_state = self.env.observe(), carried.lstm_state
        self.rollout = Rollout(self.model, self.env, storage, precision, plan, cfg, obs, lstm_state)
        self.boundary = Boundary.open(run_dir, cfg.output.keep_last, device)

    def describe(self) -> str:
        params = sum(p.numel() for p in self.model.parameters())
        return describe(
            self.cfg,
            self.run_dir,
            self.data,
            self.ctx.world_size,
            self.device,
            self.budget.batch_size,
            self.budget.planned_updates,
            params,
        )

    # ------------------------------------------------------------------ state

    def rank_state(self) -> RankState:
        return ranks.capture(
            self.env,
            self.rollout.lstm_state,
            self.rollout.obs.portfolio,
            self.ppo_update.minibatches,
            self.device,
        )

    def gather_rank_states(self, force: bool = False) -> None:
        """Collective: rank 0 keeps every other rank's state of this update boundary for the
        checkpoints it writes, every ``output.rank_state_every`` updates (or when ``force``d)."""
        b = self.boundary
        b.with_rank_states = force or self.progress.update % self.cfg.output.rank_state_every == 0
        # Rank 0 takes its own state when it saves.
        others_send = self.ctx.enabled and not self.ctx.is_main and b.with_rank_states
        # As the file holds it (tensors and plain values): its tensors
        # travel as one buffer, not pickled.
        sent = self.ctx.gather_to_main(
            {
                "state": self.rank_state().to_file() if others_send else None,
                "gpu": b.resources.gpu(),
                "gpu_off": b.resources.off_reason,
            },
            self.device,
        )
        b.other_ranks = (
            [RankState.from_file(one["state"], f"rank {r}.") for r, one in enumerate(sent[1:], 1)]
            if b.with_rank_states
            else []
        )
        b.rank_gpus = [one["gpu"] for one in sent]
        b.gpu_notes = [
            f"rank {r}: {one['gpu_off']}" for r, one in enumerate(sent) if one["gpu_off"]
        ]

    def run_state(self) -> RunState:
        """What a checkpoint of this update boundary holds (run_files/run_state.py)."""
        n, u = self.progress, self.ppo_update
        return RunState(
            model=self.model.state_dict(),
            optimizer=u.optimizer.state_dict(),
            scaler=u.precision.state_dict(),
            update=n.update,
            global_step=n.global_step,
            episodes=n.episodes,
            config=to_dict(self.cfg),
            normalizer=self.data.normalizer.state_dict(),
            world_size=self.ctx.world_size,
            num_envs=self.cfg.train.num_envs,
            **self.selection.state_dict(),
            # rank 0's own, then ranks 1, 2, ...
            ranks=[self.rank_state(), *self.boundary.other_ranks]
            if self.boundary.with_rank_states
            else [],
        )

    def _restore(
        self,
        state: RunState,
        optimizer: torch.optim.Optimizer,
        precision: Precision,
        minibatches: torch.Generator,
    ) -> RankState | None:
        """Put a checkpoint's weights, optimizer, counters and selection back; this rank's saved
        state (its carried LSTM state on the device) when its env copies and random streams
        continue, else None."""
        try:
            self.model.load_state_dict(state.model)
        except RuntimeError as err:
            raise CheckpointError(
                "checkpoint model does not fit these agent sizes "
                f"({first_line(err, 100)}); resume with the run's own config, or retrain if an "
                "older version wrote it (its actions or observed portfolio differ)"
            ) from None
        # This run's device settings, whichever device wrote it (a captured run's Adam cannot step
        # on a CPU); its saved rate is replaced at every update.
        optimizer.load_state_dict(fit_saved_state(state.optimizer, optimizer))
        precision.load_state_dict(state.scaler)
        self.progress = Progress(state.update, state.global_step, state.episodes)
        self.selection.load_state_dict(state.selection_state())
        # The env copies and random streams continue exactly when this run has the saved
        # run's workers and copies; otherwise (another world size, --num-envs or env
        # layout) every copy starts afresh.
        mine = ranks.saved_for_this_rank(state, self.ctx, self.cfg.train.num_envs)
        carried = ranks.restore(mine, self.env, minibatches, self.device) if mine else None
        return None if carried is None else replace(mine, lstm_state=carried)

    # ------------------------------------------------------------------ one update

    def collect(self) -> np.ndarray:
        """One rollout (``Rollout.collect``); the sums of the full-length episodes that ended."""
        return self.rollout.collect()

    def optimise(self) -> dict[str, float]:
        """One PPO update on the stored rollout at this update's learning rate; the
        update's statistics."""
        return self.ppo_update(
            self.budget.learning_rate(self.progress),
            self.progress.global_step,
            self.budget.planned_steps,
        )

    def paths(self) -> str:
        """How the last update ran, in one line: what compiled, what replayed as CUDA graphs."""
        u = self.ppo_update
        step = u.optimizer_step_path if u.optimizer_step is not None else "eager (fp16 scaler)"
        return (
            f"ran as: rollout {self.rollout.path}, env step "
            f"{'compiled' if self.env.compiled else 'eager'}, update {u.path}, optimizer step "
            f"{step}, precision {u.precision.describe()}"
        )

    def train_step(self) -> tuple[dict[str, float], np.ndarray]:
        """One rollout and update; returns the update's statistics and every rank's summed
        episode statistics."""
        started = time.perf_counter()
        finished = self.collect()
        # one sync per update, so the two timings split the work where it happened
        wait_for(self.device)
        collected = time.perf_counter()
        stats = self.optimise()
        # The update's time includes waiting at its gradient all-reduces for the slowest rank.
        stats.update(rollout_s=collected - started, update_s=time.perf_counter() - collected)
        if stats["nonfinite"]:
            # non-finite gradients or weights: this update is unsound and not saved
            return stats, np.zeros(0)
        self.progress.update += 1
        self.progress.global_step += self.budget.batch_size
        sums = torch.as_tensor(finished, device=self.device)
        # every rank counts every rank's episodes
        sums = self.ctx.all_reduce_sum(sums).cpu().numpy()
        self.progress.episodes += int(sums[0])
        return stats, sums

    # ------------------------------------------------------------------ evaluation

    def evaluate(self) -> dict[str, float]:
        """Walk the validation split; each metric that reaches a new best gets its best_<metric>.pt
        with the update's next checkpoint (``Boundary.improved``)."""
        self.model.eval()
        policy, state = agent_policy(self.model, len(self.data.symbols), self.device)
        metrics = selection_metrics(
            walk(
                "agent",
                policy,
                state,
                self.data,
                "validation",
                self.cfg,
                self.device,
                self.walk_scaled,
            )
        )
        self.model.train()
        b = self.boundary
        b.improved = tuple(dict.fromkeys((*b.improved, *self.selection.record(metrics))))
        return metrics

    def save_checkpoints(self, periodic: bool = False) -> Path:
        """latest.pt; with ``periodic`` also update_<n>.pt, and best_<metric>.pt of each metric
        improved since the last save: one write, the other files its other names
        (``CheckpointManager.save``)."""
        b = self.boundary
        best, b.improved = b.improved, ()
        return b.checkpoints.save(
            self.run_state().to_file(), self.progress.update if periodic else None, best
        )

    def run(self) -> None:
        """The updates until the budget is spent or a stop (training/loop.py)."""
        run(self)
