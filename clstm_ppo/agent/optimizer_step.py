"""The optimizer step (gradient clipping, then Adam) replayed as one CUDA graph
(docs/ENVIRONMENT.md).

Eager, a clipped Adam step on CUDA is nearly thirty kernel launches from Python over the parameter
lists (the norms, the clip, Adam's two moments, its bias corrections and the update). Captured, it
is one replay. Capture needs:

- Adam's state on the device (``capturable=True``: its step counts are device tensors, the bias
  corrections are computed there) and the learning rate as a device tensor that ``set_lr`` fills
  before a replay (a Python float would be baked into the graph);
- the gradients at fixed addresses: they are made (zeros) before the first backward and
  ``zero_grad`` keeps them (``set_to_none=False``), so each backward accumulates into the tensors
  the graph reads (a backward that found no gradient would hand its own output over as one: under a
  compiled loss's CUDA graphs, memory its next replay overwrites);
- Adam's state made before capture: the first call steps eagerly (Adam creates its moments, CUDA
  loads the kernels), the second captures and replays, every later call replays. Each replay first
  checks that the graph's tensors are still the live ones: gradients set to None, a loaded optimizer
  state (which also brings back the checkpoint's float rate and ``capturable`` flag) or a rate
  assigned as a float would leave it stepping stale ones.

Off CUDA (or with ``capture`` off) a call is the eager clip-and-step that ``Precision.step`` takes:
the CPU cannot run capturable Adam, so the tests cover that path, the rate tensor and the replay's
check, not the capture. The captured step computes Adam's bias corrections in float32 on the device
(the eager one in Python doubles): close to the eager weights, not bit for bit. fp16's loss scaler
checks gradients on the host and is not captured. The trainer captures its step on CUDA under
``launch.cuda_graphs`` when the update is the static, compiled one (``launch.compile_loop``) and the
precision is fp32 or bf16; ``scripts/bench/bench_update.py``'s "step_captured" path times that
update alone ("captured": over a loss whose compiled calls are CUDA graphs too). Should CUDA refuse
the capture, the step says so once and runs eagerly on.

A checkpoint keeps the optimizer's settings as they were: a captured run's Adam is ``capturable``
with a tensor rate, which the CPU cannot step. ``fit_saved_state`` gives a saved state this run's
settings before it is loaded, so a run resumes on either device whichever wrote it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from clstm_ppo.config import PPOConfig, first_line
from clstm_ppo.device import cuda_graph_capture


def make_adam(
    params: Iterable[nn.Parameter],
    lr: float,
    cfg: PPOConfig,
    capture_on: torch.device | None = None,
) -> torch.optim.Adam:
    """The update's Adam (``cfg``'s betas and eps); with ``capture_on`` a CUDA device, with its
    state there and a tensor learning rate, as a captured step needs."""
    betas, eps = (cfg.adam_betas[0], cfg.adam_betas[1]), cfg.adam_eps
    if capture_on is not None and capture_on.type == "cuda":
        return torch.optim.Adam(
            params,
            lr=torch.tensor(lr, device=capture_on),
            betas=betas,
            eps=eps,
            capturable=True,
            foreach=True,
        )
    return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The learning rate of the next steps: filled into a group's rate tensor (the one a captured
    step reads), or set as a float."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


# What make_adam decides for this run and a checkpoint must not carry
# over from the run that wrote it.
RUN_SETTINGS = ("capturable", "foreach", "lr")


def fit_saved_state(saved: dict[str, Any], optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``saved`` (an optimizer's ``state_dict``) with ``optimizer``'s own settings
    (``RUN_SETTINGS``), to load into it: Adam's moments and step counts carry over, the device
    settings stay this run's. Step counts go where the settings want them (``capturable``: on the
    parameters' device, as ``load_state_dict`` puts them; else on the host). The rate is this run's
    too: the trainer sets it before every update anyway."""
    groups = [
        {**old, **{key: new[key] for key in RUN_SETTINGS if key in new}}
        for old, new in zip(saved["param_groups"], optimizer.param_groups, strict=False)
    ]
    on_host = not any(group.get("capturable") for group in optimizer.param_groups)
    state = {
        key: {**value, "step": value["step"].cpu()}
        if on_host and isinstance(value, dict) and isinstance(value.get("step"), Tensor)
        else value
        for key, value in saved["state"].items()
    }
    # A group count that differs is left for load_state_dict to refuse.
    return {**saved, "state": state, "param_groups": groups + saved["param_groups"][len(groups) :]}


def clipped_step(
    params: list[nn.Parameter], optimizer: torch.optim.Optimizer, max_grad_norm: float
) -> Tensor:
    """Clip the gradients' global norm, then step; a device bool, False when the gradients were not
    finite (read by the caller once the update is over: nothing here waits for the device)."""
    norm = nn.utils.clip_grad_norm_(params, max_grad_norm)
    # a non-finite norm makes the weights NaN too: the caller stops without saving them
    optimizer.step()
    return torch.isfinite(norm)


class OptimizerStep:
    """Clip the gradients' global norm to ``max_grad_norm``, then step ``optimizer`` (over all its
    parameters); a call returns a device bool, False when the gradients were not finite (the caller
    reads it once the update is over). With ``capture`` and an optimizer from
    ``make_adam(..., capture_on=device)`` on CUDA, the step is replayed as one CUDA graph."""

    def __init__(self, optimizer: torch.optim.Optimizer, max_grad_norm: float, capture: bool):
        self.optimizer, self.max_grad_norm = optimizer, max_grad_norm
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.capture = capture and bool(self.params) and self.params[0].device.type == "cuda"
        # what was asked, kept when CUDA refuses the capture
        self.asked = "captured" if self.capture else "eager"
        if self.capture and not all(
            g.get("capturable") and isinstance(g["lr"], Tensor) for g in optimizer.param_groups
        ):
            raise ValueError(
                "a captured optimizer step needs Adam with capturable=True and a tensor learning "
                "rate (make it with optimizer_step.make_adam(..., capture_on=device))"
            )
        if self.capture:
            # fresh zeros: a gradient already there may be memory a compiled
            # backward's replay reuses
            for param in self.params:
                if param.requires_grad:
                    param.grad = torch.zeros_like(param)
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.bound: list[Tensor] = []  # every tensor the graph reads or writes, as captured
        self.finite: Tensor | None = None  # the graph's output: overwritten in place by each replay

    @property
    def path(self) -> str:
        """How the steps ran: "captured" (replayed as one CUDA graph, from the
        second on) or "eager"."""
        return "captured" if self.graph is not None else "eager"

    def set_lr(self, lr: float) -> None:
        """The learning rate of the next steps: filled into the tensor a graph reads,
        or set as a float."""
        set_lr(self.optimizer, lr)

    def zero_grad(self) -> None:
        if not self.capture:
            self.optimizer.zero_grad(set_to_none=True)
            return
        # Captured, the graph reads these very tensors: zero them in place instead of letting
        # backward make new ones (and make any that something else set to None before the capture;
        # after it, check_bound refuses those). A frozen parameter's gradient goes: Adam skips a
        # parameter without one, but steps a zero gradient by its moments.
        for param in self.params:
            if not param.requires_grad:
                param.grad = None
            elif param.grad is None:
                param.grad = torch.zeros_like(param)
        grads = [p.grad for p in self.params if p.grad is not None]
        if grads:
            torch._foreach_zero_(grads)

    def live(self) -> list[Tensor]:
        """The tensors a captured step reads now: gradients, learning rates and Adam's state."""
        state = [
            t
            for p in self.params
            for t in self.optimizer.state.get(p, {}).values()
            if isinstance(t, Tensor)
        ]
        return [
            *(p.grad for p in self.params if p.grad is not None),
            *(g["lr"] for g in self.optimizer.param_groups),
            *state,
        ]

    def check_bound(self) -> None:
        """Raise unless the tensors the graph was captured with (``bound``) are still the live ones:
        else a replay would step stale gradients or a stale rate, or write into freed memory."""
        live = self.live()
        if len(live) != len(self.bound) or any(
            a is not b for a, b in zip(live, self.bound, strict=False)
        ):
            raise RuntimeError(
                "the captured optimizer step's tensors were replaced (gradients set to None, an "
                "optimizer state loaded, or the learning rate assigned instead of set_lr): make a "
                "new OptimizerStep after such a change"
            )

    def __call__(self) -> Tensor:
        self.calls += 1
        if not self.capture:
            return clipped_step(self.params, self.optimizer, self.max_grad_norm)
        if self.calls == 1:
            # eager once: Adam makes its state, CUDA loads the kernels before a capture
            with warnings.catch_warnings():
                # Adam's "capturable, run without capture" notice: expected here
                warnings.filterwarnings("ignore", message=".*capturable.*")
                return clipped_step(self.params, self.optimizer, self.max_grad_norm)
        if self.graph is None:
            try:
                self.graph, self.bound = torch.cuda.CUDAGraph(), self.live()
                with cuda_graph_capture(self.graph):  # records the step without running it ...
                    self.finite = clipped_step(self.params, self.optimizer, self.max_grad_norm)
            except RuntimeError as err:  # a capture CUDA refuses: step on eagerly, and say why once
                self.capture, self.graph, self.bound, self.finite = False, None, [], None
                warnings.warn(
                    f"CUDA graph capture of the optimizer step failed ({first_line(err)}); it "
                    "steps eagerly (set launch.cuda_graphs off to skip the attempt)",
                    stacklevel=2,
                )
                return self()
        self.check_bound()
        self.graph.replay()  # ... so the capturing call replays it too
        assert self.finite is not None
        return self.finite.clone()  # the next replay overwrites the graph's output
