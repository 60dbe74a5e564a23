"""Mixed precision: autocast for the forward, GradScaler for fp16, the same calls in fp32."""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from clstm_ppo.agent.optimizer_step import clipped_step
from clstm_ppo.config import ConfigError

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class Precision:
    """``fp32`` (default), ``bf16`` (autocast, no scaling needed) or ``fp16`` (autocast + loss scaling)."""

    def __init__(self, device: torch.device, name: str):
        if name not in PRECISIONS:
            raise ConfigError(f"train.precision {name!r} is not one of {', '.join(PRECISIONS)}")
        if name == "fp16" and device.type != "cuda":
            # CPU LSTM kernels (oneDNN) have no float16 path; bfloat16 is the CPU's half precision.
            raise ConfigError("train.precision fp16 needs a CUDA device; on the CPU use bf16 or fp32")
        self.device, self.name, self.dtype = device, name, PRECISIONS[name]
        # Only fp16 loses small gradients to underflow; GradScaler multiplies the loss to keep them.
        self.scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None

    @property
    def lstms_in_float32(self) -> bool:
        """bf16 on CUDA: autocast would run cuDNN's LSTMs in fp16 without loss scaling, so they run in float32
        (the MLP and heads still in bf16). fp16 keeps cuDNN's fp16 LSTMs under its GradScaler; the CPU's bf16
        LSTM (oneDNN) really is bf16."""
        return self.device.type == "cuda" and self.name == "bf16"

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self, model: nn.Module, optimizer: torch.optim.Optimizer, max_grad_norm: float) -> torch.Tensor:
        """Clip and step; a device bool, False when the gradients were not finite (without a scaler, a failure the
        caller reads once the update is over: the step is taken anyway, so nothing here waits for the device)."""
        if self.scaler is None:
            return clipped_step(list(model.parameters()), optimizer, max_grad_norm)
        self.scaler.unscale_(optimizer)
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        self.scaler.step(optimizer)  # skips the step on inf/NaN and lowers the scale: fp16's normal overflow
        self.scaler.update()
        return torch.ones((), dtype=torch.bool, device=norm.device)

    def state_dict(self) -> dict | None:
        return self.scaler.state_dict() if self.scaler else None

    def load_state_dict(self, state: dict | None) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
