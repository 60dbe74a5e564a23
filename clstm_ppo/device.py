"""The one place that picks the device; everything else receives a torch.device."""
from __future__ import annotations

import os
import shutil

import torch

from clstm_ppo.config import ConfigError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def cuda_device_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pick_device(choice: str, local_rank: int = 0) -> torch.device:
    """``auto``: this worker's GPU when CUDA is there, else the CPU; ``cuda`` without CUDA is an error."""
    if choice not in DEVICE_CHOICES:
        raise ConfigError(f"--device {choice!r} is not one of {', '.join(DEVICE_CHOICES)}")
    if choice == "cpu" or (choice == "auto" and cuda_device_count() == 0):
        return torch.device("cpu")
    if cuda_device_count() == 0:
        raise ConfigError("--device cuda was asked for, but this machine has no CUDA device visible to torch; "
                          "use --device cpu (or auto)")
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    return device


def configure_backends(device: torch.device) -> None:
    """Fast defaults on GPUs (TF32 matmuls, cuDNN autotuning); nothing to do on the CPU."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True


CXX_COMPILERS = ("g++", "c++", "clang++")  # what torch.compile's CPU backend (inductor) builds with


def check_compile_toolchain(device_kind: str) -> None:
    """``torch.compile`` turns CPU code into C++: fail in one line now, not in the first update."""
    names = [os.environ.get("CXX", ""), *CXX_COMPILERS]
    if device_kind == "cpu" and not any(shutil.which(n) for n in names if n):
        raise ConfigError("train.compile on a CPU needs a C++ compiler (g++ or clang++) on PATH; "
                          "install one or leave train.compile=false")
