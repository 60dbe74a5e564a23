"""Mixed precision: autocast for the forward, GradScaler for fp16, the same calls in fp32
(docs/TRAINING.md, "Precision")."""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn

from clstm_ppo.agent.optimizer_step import clipped_step
from clstm_ppo.config import ConfigError

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@functools.cache
def cpu_runs_bf16_lstm() -> bool:
    """Whether this CPU runs a bfloat16 LSTM forward and backward under autocast: oneDNN builds its
    bf16 LSTM only on AVX-512 CPUs (natively with AVX512-BF16 or AMX), and refuses on an AVX2-only
    one ("could not create a primitive descriptor"), as it does when ``ONEDNN_MAX_CPU_ISA=AVX2``
    holds it to AVX2. A tiny LSTM, once a process."""
    lstm = nn.LSTM(4, 4, batch_first=True)
    x = torch.randn(2, 3, 4, requires_grad=True)
    try:
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            out, _ = lstm(x)
        out.float().sum().backward()
    except RuntimeError:
        return False
    return out.dtype == torch.bfloat16 and x.grad is not None


class Precision:
    """``fp32`` (default), ``bf16`` (autocast, no scaling needed) or ``fp16``
    (autocast + loss scaling)."""

    def __init__(self, device: torch.device, name: str):
        if name not in PRECISIONS:
            raise ConfigError(f"launch.precision {name!r} is not one of {', '.join(PRECISIONS)}")
        if name == "fp16" and device.type != "cuda":
            # CPU LSTM kernels (oneDNN) have no float16 path; bfloat16 is the CPU's half precision.
            raise ConfigError(
                "launch.precision fp16 needs a CUDA device; on the CPU use bf16 or fp32"
            )
        self.device, self.name, self.dtype = device, name, PRECISIONS[name]
        # Only fp16 loses small gradients to underflow; GradScaler multiplies the loss to keep them.
        self.scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None

    @property
    def lstms_in_float32(self) -> bool:
        """Whether bf16 runs the LSTMs in float32 (the MLP and heads still in bf16). On CUDA always:
        autocast would run cuDNN's LSTMs in fp16 without loss scaling. On a CPU where oneDNN has no
        bf16 LSTM (AVX2-only): the alternative is a crash. Elsewhere the CPU's bf16 LSTM really is
        bf16. fp16 keeps cuDNN's fp16 LSTMs under its GradScaler."""
        if self.name != "bf16":
            return False
        return self.device.type == "cuda" or (
            self.device.type == "cpu" and not cpu_runs_bf16_lstm()
        )

    def describe(self) -> str:
        """The precision as the run's "ran as" line names it, e.g. "bf16 (LSTMs in fp32: no bf16
        LSTM on this CPU)"."""
        if not self.lstms_in_float32:
            return self.name
        why = (
            "cuDNN would run them in fp16"
            if self.device.type == "cuda"
            else "no bf16 LSTM on this CPU"
        )
        return f"{self.name} (LSTMs in fp32: {why})"

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, max_grad_norm: float
    ) -> torch.Tensor:
        """Clip and step; a device bool, False when the gradients were not finite (without a scaler,
        a failure the caller reads once the update is over: the step is taken anyway, so nothing
        here waits for the device)."""
        if self.scaler is None:
            return clipped_step(list(model.parameters()), optimizer, max_grad_norm)
        self.scaler.unscale_(optimizer)
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        # skips the step on inf/NaN and lowers the scale: fp16's normal overflow
        self.scaler.step(optimizer)
        self.scaler.update()
        return torch.ones((), dtype=torch.bool, device=norm.device)

    def state_dict(self) -> dict | None:
        return self.scaler.state_dict() if self.scaler else None

    def load_state_dict(self, state: dict | None) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
