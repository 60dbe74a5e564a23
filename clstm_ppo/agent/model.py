"""The cascaded-LSTM actor-critic of Zou et al. (2024), and the two variants of its
comparison (``agent.kind``).

``clstm``: LSTM 1 reads the last TW bars of market features in one batched call; its last hidden
state goes through a 3-layer tanh MLP. LSTM 2 runs over the decision sequence on that encoding plus
the portfolio state, carrying its hidden state across steps and resetting it where an episode
starts. A masked categorical actor and a critic read LSTM 2's output.

``lstm``: no LSTM 1 or MLP; the current bar's features (the window's last row) go to LSTM 2 with the
portfolio state: recurrent PPO with one LSTM. ``mlp``: no recurrence at all; the current bar and the
portfolio state go through two tanh layers to the heads: PPO with an MLP policy, as in the paper's
baseline (and FinRL's, whose state is the current bar's indicators plus the holdings).

Every kind has the same interface (``encoder``, ``forward``, ``decide``, ``initial_state``,
``heads``), so the trainer, the PPO update, the per-bar code cache, evaluate and predict never ask
which one runs; the ``mlp`` kind's state is empty (zero-width) and passes through unchanged.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from clstm_ppo.config import AgentConfig
from clstm_ppo.env.actions import HOLD

KINDS = ("clstm", "lstm", "mlp")  # agent.kind
MASKED_LOGIT = -1e9  # finite, so entropy of a masked categorical stays 0 * (-1e9) = 0, never NaN
State = tuple[Tensor, Tensor]


def run_lstm(lstm: nn.LSTM, x: Tensor, state: State | None, float32: bool) -> tuple[Tensor, State]:
    """``lstm(x, state)``; with ``float32``, outside autocast in float32. On CUDA, autocast runs
    cuDNN's LSTM in float16 whatever dtype was asked, so under bf16 (no loss scaling) the LSTMs
    would run in unscaled fp16."""
    if not float32:
        return lstm(x, state)
    with torch.autocast(device_type=x.device.type, enabled=False):
        state = None if state is None else (state[0].float(), state[1].float())
        return lstm(x.float(), state)


def gate_step(
    gates_x: Tensor, h: Tensor, c: Tensor, weight_hh: Tensor, bias_hh: Tensor
) -> tuple[Tensor, Tensor]:
    """One LSTM step from its input's gates (N, 4H) and (N, H) ``h`` and ``c``. PyTorch's gate
    order: input, forget, cell, output."""
    i, f, g, o = (gates_x + F.linear(h, weight_hh, bias_hh)).chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def recurrence(
    gates_x: Tensor, starts: Tensor, h: Tensor, c: Tensor, weight_hh: Tensor, bias_hh: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """LSTM steps over L steps of input gates ``gates_x`` (L, N, 4H) already computed, from (N, H)
    ``h`` and ``c``; the state is zeroed before each step where ``starts`` (L, N) says an episode
    begins. Returns the outputs (L, N, H) and the last h and c. A pure function of tensors with a
    fixed-length loop: no host sync, no data-dependent shape, no module, so it compiles as one graph
    (``agent/static_update.py``)."""
    outputs = []
    for step in range(gates_x.shape[0]):
        keep = (~starts[step]).to(h.dtype).unsqueeze(-1)
        h, c = gate_step(gates_x[step], h * keep, c * keep, weight_hh, bias_hh)
        outputs.append(h)
    return torch.stack(outputs), h, c


Recurrence = Callable[
    [Tensor, Tensor, Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]
]


def _init(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)  # CleanRL's initialisation
    nn.init.zeros_(layer.bias)
    return layer


class MarketEncoder(nn.Module):
    """LSTM 1 + MLP: (B, TW, F) windows -> (B, mlp_hidden). Pretraining trains this part alone."""

    def __init__(self, n_features: int, cfg: AgentConfig):
        super().__init__()
        self.lstm = nn.LSTM(n_features, cfg.lstm1_hidden, batch_first=True)
        # set by the trainer for precisions whose LSTM kernel would fall to fp16
        self.lstm_float32 = False
        self.code_width = cfg.mlp_hidden
        gain = np.sqrt(2)
        self.mlp = nn.Sequential(
            _init(nn.Linear(cfg.lstm1_hidden, cfg.mlp_hidden), gain),
            nn.Tanh(),
            _init(nn.Linear(cfg.mlp_hidden, cfg.mlp_hidden), gain),
            nn.Tanh(),
            _init(nn.Linear(cfg.mlp_hidden, cfg.mlp_hidden), gain),
            nn.Tanh(),
        )

    def forward(self, windows: Tensor) -> Tensor:
        _, (h, _) = run_lstm(self.lstm, windows, None, self.lstm_float32)
        return self.mlp(h[-1])


class BarProjection(nn.Module):
    """The current bar's features (the window's last row) through one linear layer:
    (B, TW, F) -> (B, out).

    With no activation, whatever reads the code absorbs the layer (LSTM 2's input weights,
    the MLP core's first layer): the bar goes in as it is, at the code width the trainer's
    per-bar cache holds (``agent.mlp_hidden``), which pretraining's next-bar-return head
    reads too (``code_width``).
    """

    def __init__(self, n_features: int, out: int):
        super().__init__()
        self.linear = _init(nn.Linear(n_features, out), 1.0)  # gain 1: keeps scale
        self.code_width = out
        self.register_load_state_dict_pre_hook(_bar_projection_keys)

    def forward(self, windows: Tensor) -> Tensor:
        return self.linear(windows[:, -1])


def _bar_projection_keys(_module: nn.Module, state_dict: dict, prefix: str, *_: object) -> None:
    """Checkpoints written before BarProjection had its name keep its layer as ``mlp.0``: read
    it as ``linear``."""
    for part in ("weight", "bias"):
        old = f"{prefix}mlp.0.{part}"
        if old in state_dict:
            state_dict[f"{prefix}linear.{part}"] = state_dict.pop(old)


class ActorCritic(nn.Module):
    """The actor-critic of ``cfg.kind``: clstm (the default), lstm or mlp (module docstring)."""

    def __init__(self, n_features: int, portfolio_dim: int, n_actions: int, cfg: AgentConfig):
        super().__init__()
        if cfg.kind not in KINDS:
            raise ValueError(f"agent.kind {cfg.kind!r} is not one of {', '.join(KINDS)}")
        self.kind = cfg.kind
        self.encoder = (
            MarketEncoder(n_features, cfg)
            if cfg.kind == "clstm"
            else BarProjection(n_features, cfg.mlp_hidden)
        )
        inputs = cfg.mlp_hidden + portfolio_dim
        width = cfg.mlp_core_hidden if cfg.kind == "mlp" else cfg.lstm2_hidden
        self.lstm2: nn.LSTM | None = None
        self.core: nn.Sequential | None = None
        if cfg.kind == "mlp":
            gain = np.sqrt(2)
            self.core = nn.Sequential(
                _init(nn.Linear(inputs, width), gain),
                nn.Tanh(),
                _init(nn.Linear(width, width), gain),
                nn.Tanh(),
            )
        else:
            self.lstm2 = nn.LSTM(inputs, width)  # time-major: (L, N, in)
            for name, param in self.lstm2.named_parameters():
                if "bias" in name:
                    nn.init.zeros_(param)
                else:
                    nn.init.orthogonal_(param, 1.0)
        self.actor = _init(nn.Linear(width, n_actions), 0.01)  # near-uniform first policy
        if cfg.initial_hold > 1.0 / n_actions:
            # hold's logit so far above the others' 0 that softmax gives it this
            with torch.no_grad():
                self.actor.bias[HOLD] = math.log(
                    cfg.initial_hold * (n_actions - 1) / (1.0 - cfg.initial_hold)
                )
        self.critic = _init(nn.Linear(width, 1), 1.0)
        # the carried state's width: none without LSTM 2
        self.hidden_size = 0 if self.lstm2 is None else width
        self.lstm_float32 = False

    def run_lstms_in_float32(self, on: bool) -> None:
        """Both LSTMs outside autocast in float32 (``Precision.lstms_in_float32``), the heads
        as autocast says."""
        self.lstm_float32 = on
        if isinstance(self.encoder, MarketEncoder):
            self.encoder.lstm_float32 = on

    def initial_state(self, num_envs: int, device: torch.device) -> State:
        zeros = torch.zeros(1, num_envs, self.hidden_size, device=device)
        return zeros, zeros.clone()

    def forward(
        self,
        windows: Tensor,
        portfolio: Tensor,
        mask: Tensor,
        starts: Tensor,
        state: State,
        bar_index: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, State]:
        """Masked logits (L, N, A), values (L, N) and the final state, for sequences
        of L steps of N envs.

        ``windows`` (L, N, TW, F); ``starts[l, n]``: step l of env n begins an episode, so
        LSTM 2's state is zeroed before it. Stretches without a start run as one fused LSTM
        call. With ``bar_index`` (L, N), ``windows`` are (U, TW, F) distinct bars and step l
        of env n reads bar ``bar_index[l, n]``: each bar is encoded once, and its gradient
        sums over the steps that read it.
        """
        steps, envs = portfolio.shape[:2]
        if bar_index is None:
            code = self.encoder(windows.reshape(steps * envs, *windows.shape[2:])).view(
                steps, envs, -1
            )
        else:
            code = self.encoder(windows)[bar_index]
        return self.decide(code, portfolio, mask, starts, state)

    def decide(
        self,
        code: Tensor,
        portfolio: Tensor,
        mask: Tensor,
        starts: Tensor,
        state: State,
        *,
        static: bool = False,
        block: int | None = None,
        steps: Recurrence = recurrence,
    ) -> tuple[Tensor, Tensor, State]:
        """``forward`` from the encoder's output (L, N, mlp_hidden) instead of the windows: the one
        forward of the core and heads, whichever way LSTM 2 steps.

        The encoder sees only a bar's window, so a caller can encode each bar once and reuse it.
        LSTM 2 runs as ``nn.LSTM`` calls over the stretches between episode starts (one host sync to
        find them), or with ``static`` as fixed-shape arithmetic with no host sync
        (``lstm2_static``), which compiles and captures.
        """
        x = torch.cat([code, portfolio], dim=-1)
        if self.lstm2 is None:
            # mlp: each decision from its own step alone; the empty state passes through
            return (*self.heads(self.core(x), mask), state)
        out, state = (
            self.lstm2_static(x, starts, state, block, steps)
            if static
            else self.lstm2_fused(x, starts, state)
        )
        return (*self.heads(out, mask), state)

    def decide_one(
        self, code: Tensor, portfolio: Tensor, mask: Tensor, start: Tensor, state: State
    ) -> tuple[Tensor, Tensor, State]:
        """``decide`` for one step of N copies ((N, ...) inputs, (N, A) logits and (N,) values),
        static: no host sync and no ``nn.LSTM`` call, so a rollout's decision compiles into one
        graph with the env step (``agent/fused_rollout.py``)."""
        logits, values, state = self.decide_static(
            code[None], portfolio[None], mask[None], start[None], state
        )
        return logits[0], values[0], state

    def decide_static(
        self,
        code: Tensor,
        portfolio: Tensor,
        mask: Tensor,
        starts: Tensor,
        state: State,
        block: int | None = None,
        steps: Recurrence = recurrence,
    ) -> tuple[Tensor, Tensor, State]:
        """``decide`` with fixed shapes and no host sync, for a compiled or captured update
        (``lstm2_static``)."""
        return self.decide(
            code, portfolio, mask, starts, state, static=True, block=block, steps=steps
        )

    def lstm2_fused(self, x: Tensor, starts: Tensor, state: State) -> tuple[Tensor, State]:
        """LSTM 2 over (L, N, in) inputs as ``nn.LSTM`` calls, one per stretch with no episode
        start, the state zeroed where one begins."""
        steps, envs = x.shape[:2]
        # Where any sequence starts an episode: one copy of L flags to the host
        # (one GPU sync), then host work.
        cuts = (
            [0, *(torch.nonzero(starts[1:].any(-1).cpu()).squeeze(-1) + 1).tolist(), steps]
            if steps > 1
            else [0, 1]
        )
        h, c = state
        outputs = []
        for begin, end in itertools.pairwise(cuts):
            keep = (~starts[begin]).to(h.dtype).view(1, envs, 1)
            out, (h, c) = run_lstm(
                self.lstm2, x[begin:end], (h * keep, c * keep), self.lstm_float32
            )
            outputs.append(out)
        return (torch.cat(outputs) if len(outputs) > 1 else outputs[0]), (h, c)

    def lstm2_static(
        self, x: Tensor, starts: Tensor, state: State, block: int | None, steps: Recurrence
    ) -> tuple[Tensor, State]:
        """LSTM 2 with fixed shapes and no host sync: its input gates for all L steps in one matmul,
        then its recurrence (``steps``, by default ``recurrence``; a compiled twin from the caller)
        over blocks of ``block`` steps (all L by default) with the state zeroed at episode starts.
        The same arithmetic as ``lstm2_fused``'s LSTM calls, in another order."""
        lstm, length = self.lstm2, x.shape[0]
        block = block or length
        with (
            torch.autocast(device_type=x.device.type, enabled=False)
            if self.lstm_float32
            else contextlib.nullcontext()
        ):
            h, c = state[0][0], state[1][0]
            if self.lstm_float32:
                x, h, c = x.float(), h.float(), c.float()
            gates_x = F.linear(x, lstm.weight_ih_l0, lstm.bias_ih_l0)
            outputs = []
            for begin in range(0, length, block):
                out, h, c = steps(
                    gates_x[begin : begin + block],
                    starts[begin : begin + block],
                    h,
                    c,
                    lstm.weight_hh_l0,
                    lstm.bias_hh_l0,
                )
                outputs.append(out)
        return (torch.cat(outputs) if len(outputs) > 1 else outputs[0]), (h[None], c[None])

    def heads(self, out: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Masked logits and values from LSTM 2's (or the MLP core's) output, in float32 whatever
        autocast computed them in: -1e9 overflows float16 (a masked_fill on half logits raises), and
        the losses and the sampler want float32."""
        logits = self.actor(out).float().masked_fill(~mask, MASKED_LOGIT)
        return logits, self.critic(out).squeeze(-1).float()
