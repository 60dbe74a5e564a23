"""The PPO update's minibatch loss with fixed shapes and no host sync, compiled
(docs/ENVIRONMENT.md).

The eager loss (``ppo.DistinctBarsLoss``) encodes the minibatch's distinct bars (``torch.unique``: a
shape set by the data) and cuts LSTM 2 into fused runs at episode starts (read on the host). Neither
compiles, and at GPU sizes, where some copy of a minibatch starts an episode at almost every step,
the runs are one step each anyway. Here:

- LSTM 1 encodes a fixed set of windows, whichever is fewer: every observable bar of the split
  (the bar codes the rollout reads, by a position table) or every decision of the minibatch.
  LSTM 1 stays an ``nn.LSTM`` outside the compiled code (one cuDNN or oneDNN call; dynamo would
  break the graph there).
- LSTM 2's input gates come from one matmul over the whole sequence, then its recurrence runs with
  resets as ``model.recurrence`` over blocks of at most ``MAX_BLOCK`` steps, compiled once as one
  graph: compile time grows with the block, not with ``ppo.num_steps``, and every block has one
  shape, so nothing recompiles.
- The loss arithmetic (``ppo.ppo_losses``) is compiled as a second graph.

The update does not run through DDP's forward, so under DDP its gradients are averaged by
one all-reduce before each optimizer step (``ppo_update``'s ``average_gradients``), the
mean DDP would take.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn

from clstm_ppo.agent.model import Recurrence, recurrence
from clstm_ppo.agent.ppo import choice_weights, ppo_losses
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.storage import RolloutStorage
from clstm_ppo.config import PPOConfig
from clstm_ppo.data.windows import MarketWindows
from clstm_ppo.device import compile_graph, cudagraph_skips

# LSTM 2 steps per compiled recurrence call: compile time grows with each (docs/BENCHMARKS.md)
MAX_BLOCK = 16


def recurrence_block(num_steps: int) -> int:
    """Steps per compiled recurrence call: the largest divisor of ``num_steps`` up to
    ``MAX_BLOCK`` (every block one shape, so one graph), unless that is under half of
    ``MAX_BLOCK`` (127 steps would be 127 calls of one step); then ``MAX_BLOCK``, and the last,
    shorter block is a second graph."""
    divisor = max(d for d in range(1, min(num_steps, MAX_BLOCK) + 1) if num_steps % d == 0)
    return divisor if divisor == num_steps or 2 * divisor >= MAX_BLOCK else MAX_BLOCK


def loss_arithmetic(
    cfg: PPOConfig,
    logits: Tensor,
    values: Tensor,
    actions: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    returns: Tensor,
    old_values: Tensor,
    prior_actions: Tensor,
    prior_coef: Tensor,
    choices: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """``ppo_losses`` with every tensor positional: a compiled graph is called with
    positional arguments only."""
    return ppo_losses(
        logits,
        values,
        actions,
        old_logprobs,
        advantages,
        returns,
        old_values,
        prior_actions,
        prior_coef,
        cfg,
        choices,
    )


class StaticMinibatchLoss:
    """``ppo.MinibatchLoss`` with fixed shapes: the same loss as the eager one (the tests compare
    them), in pieces that compile (``compile``) into two graphs. ``by_bar``: LSTM 1 encodes every
    observable bar (True) or every decision of the minibatch (False); by default whichever is fewer
    windows. ``cuda_graphs``: compiled in inductor's "reduce-overhead" mode, which replays each
    compiled call as a CUDA graph on CUDA (the trainer's ``launch.update_graphs``; measured on a GPU
    as ``scripts/bench/bench_update.py``'s "graphs" and "captured" paths)."""

    def __init__(
        self,
        model: nn.Module,
        windows: MarketWindows,
        storage: RolloutStorage,
        cfg: PPOConfig,
        precision: Precision,
        compile: bool = True,
        by_bar: bool | None = None,
        cuda_graphs: bool = False,
    ):
        self.model, self.windows, self.storage, self.precision, self.cfg = (
            model,
            windows,
            storage,
            precision,
            cfg,
        )
        decisions = storage.num_steps * (storage.num_envs // cfg.num_minibatches)
        bars = windows.observable_rows()
        self.bars: Tensor | None = None
        if len(bars) <= decisions if by_bar is None else by_bar:
            # each observable bar once, looked up by flat row
            self.bars = bars
            self.position = torch.zeros(
                windows.n_symbols * windows.n_bars, dtype=torch.long, device=bars.device
            )
            self.position[bars] = torch.arange(len(bars), device=bars.device)
        self.encoded = len(bars) if self.bars is not None else decisions
        self.block = recurrence_block(storage.num_steps)
        losses = partial(loss_arithmetic, cfg)
        self.cuda_graphs = compile and cuda_graphs
        if self.cuda_graphs and cfg.grad_accumulation > 1:
            # A gradient that a captured backward allocated is overwritten
            # by the next minibatch's replay.
            raise ValueError(
                "the update's CUDA graphs need ppo.grad_accumulation 1 (the next replay overwrites "
                "the gradients being accumulated)"
            )
        self.steps: Recurrence = (
            compile_graph(recurrence, "LSTM 2 recurrence", self.cuda_graphs)
            if compile
            else recurrence
        )
        self.losses = compile_graph(losses, "PPO loss", self.cuda_graphs) if compile else losses
        # Graphs inductor compiled without the CUDA graphs reduce-overhead asked for (it falls
        # back silently): counted around this loss's own calls, so the trainer's "ran as" line
        # does not claim "graphs" for them.
        self.cudagraph_skips = 0

    def __call__(self, idx: Tensor, advantages: Tensor) -> tuple[Tensor, Tensor]:
        s, model = self.storage, self.model
        skips = cudagraph_skips()
        if self.cuda_graphs:
            # a new minibatch: the last one's graph outputs are spent
            torch.compiler.cudagraph_mark_step_begin()
        rows = s.rows[:, idx]
        h0, c0 = s.initial_state
        # float32 leaves that ask for their gradient, as the state between blocks
        # is: one graph serves every block.
        state = (h0[:, idx].float().requires_grad_(), c0[:, idx].float().requires_grad_())
        with self.precision.autocast():
            if self.bars is not None:
                # Indexing, as the eager loss's codes are read: on CUDA its backward sums each bar's
                # gradient in a fixed order (index_select's adds atomically, in any order).
                code = model.encoder(self.windows.gather(self.bars))[self.position[rows]]
            else:
                code = model.encoder(self.windows.gather(rows.reshape(-1))).view(*rows.shape, -1)
            logits, values, _ = model.decide_static(
                code,
                s.portfolio[:, idx],
                s.mask[:, idx],
                s.starts[:, idx],
                state,
                self.block,
                self.steps,
            )
        loss, stats = self.losses(
            logits,
            values,
            s.actions[:, idx],
            s.logprobs[:, idx],
            advantages[:, idx],
            s.returns[:, idx],
            s.values[:, idx],
            s.prior_actions[:, idx],
            s.prior_coef,
            choice_weights(s.mask[:, idx], self.cfg),
        )
        self.cudagraph_skips += cudagraph_skips() - skips
        # A CUDA graph's outputs are overwritten by its next replay; the
        # update keeps the statistics longer.
        return loss, stats.clone() if self.cuda_graphs else stats
