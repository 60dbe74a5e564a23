"""The one place that picks the device; everything else receives a torch.device."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from clstm_ppo.config import CHOICES, ConfigError, first_line

DEVICE_CHOICES = CHOICES["launch.device"]


def cuda_device_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pick_device(choice: str, local_rank: int = 0) -> torch.device:
    """``auto``: this worker's GPU when CUDA is there, else the CPU; ``cuda`` without
    CUDA is an error."""
    if choice not in DEVICE_CHOICES:
        raise ConfigError(f"--device {choice!r} is not one of {', '.join(DEVICE_CHOICES)}")
    if choice == "cpu" or (choice == "auto" and cuda_device_count() == 0):
        return torch.device("cpu")
    if cuda_device_count() == 0:
        raise ConfigError(
            "--device cuda was asked for, but this machine has no CUDA device visible to torch; "
            "use --device cpu (or auto)"
        )
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    return device


def configure_backends(device: torch.device) -> None:
    """Fast defaults: freed host memory kept for reuse (every device), TF32 matmuls and cuDNN
    autotuning (GPUs)."""
    keep_freed_host_memory()
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True


def wait_for(device: torch.device) -> None:
    """Block until the device has finished its queued work, so host timers measure it (a
    no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def start_peak_memory(device: torch.device) -> float | None:
    """On a GPU: the memory allocated now (GB), with the peak counter reset to
    it; None on the CPU."""
    if device.type != "cuda":
        return None
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device) / 1e9


def peak_memory_gb(device: torch.device) -> float | None:
    """On a GPU: the most memory allocated since ``start_peak_memory`` (GB), tensors only (the
    caching allocator's reserve aside); None on the CPU."""
    return torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None


# glibc's mallopt parameters (malloc.h); other C libraries ignore or lack them.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
KEEP_FREED_BYTES = 64 << 20  # at most this much freed memory stays at the heap's top
HEAP_UP_TO_BYTES = 32 << 20  # blocks up to this size come from the heap (glibc's upper limit)


def usable_cores() -> int:
    """The cores this process may run on (taskset, a container's cpuset, a pinned test worker),
    not every core of the machine: threads beyond them only wait for each other, spinning at
    OpenMP's barriers."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def available_memory() -> int | None:
    """Bytes of host memory this process could still take: the kernel's MemAvailable, or less where
    a cgroup (a container's memory limit) allows less; None where neither can be read."""
    limits = []
    try:
        with open("/proc/meminfo") as fh:
            limits += [
                int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:")
            ]
    except OSError:
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as mx, open("/sys/fs/cgroup/memory.current") as cur:
            ceiling = mx.read().strip()
            if ceiling != "max":
                limits.append(int(ceiling) - int(cur.read().strip()))
    except (OSError, ValueError):
        pass
    return max(0, min(limits)) if limits else None


def keep_freed_host_memory() -> bool:
    """Ask glibc to keep freed host memory for reuse instead of returning it to the OS at once.

    Every env step and update allocates and frees tensors of 20 KB to 6 MB. By default glibc hands
    a freed heap top above 128 KB back to the OS and maps large blocks afresh, so the next step
    page-faults the same memory in again (docs/BENCHMARKS.md measures the faults and the time they
    cost). The price is up to 64 MB of freed
    memory held by the process. Returns whether the C library took the settings (a no-op elsewhere).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES)) & bool(
        mallopt(_M_MMAP_THRESHOLD, HEAP_UP_TO_BYTES)
    )


CXX_COMPILERS = ("g++", "c++", "clang++")  # what torch.compile's CPU backend (inductor) builds with


def check_compile_toolchain(device_kind: str) -> None:
    """``torch.compile`` turns CPU code into C++: fail in one line now, not in the first update."""
    names = [os.environ.get("CXX", ""), *CXX_COMPILERS]
    if device_kind == "cpu" and not any(shutil.which(n) for n in names if n):
        raise ConfigError(
            "launch.compile_encoder on a CPU needs a C++ compiler (g++ or clang++) on PATH; "
            "install one or leave launch.compile_encoder=false"
        )


# Graphs one compiled function may hold in a process. A study trains runs of several agent kinds,
# rewards and folds in one process (lab/clstm_lab/studies/seeded_runs.py), each a new graph; at
# dynamo's default of 8 the rest would run eagerly.
RECOMPILE_LIMIT = 64


def key_cpu_code_by_vector_isa() -> None:
    """Pin inductor's CPU vector width to the instruction set it picks here (AVX-512, or AVX2 where
    the CPU or ``ATEN_CPU_CAPABILITY=avx2`` says so), which puts it in the key of inductor's on-disk
    graph cache. Left unset, the key omits it: a graph cached under AVX-512 and reloaded under AVX2
    (the same cache dir, another ``ATEN_CPU_CAPABILITY``, or a cache shared by unlike machines) runs
    wrapper code of one width over kernels of the other, and gives wrong numbers or a segmentation
    fault (docs/TRAINING.md, "Compiled and captured paths")."""
    from torch._inductor import config as inductor_config
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    if inductor_config.cpp.simdlen is None:
        isa = pick_vec_isa()
        if isa:  # no vector ISA (an unknown CPU): inductor writes scalar code, nothing to key
            inductor_config.cpp.simdlen = isa.bit_width()


def compile_graph(
    fn: Callable[..., Any], name: str, cuda_graphs: bool = False, allow_rnn: bool = False
) -> Callable[..., Any]:
    """``fn`` compiled as one graph per input shape (``fullgraph=True, dynamic=False``), in
    inductor's "reduce-overhead" mode with ``cuda_graphs`` (each call replayed as a CUDA graph on
    CUDA). Each call runs under dynamo settings for this function alone: room for
    ``RECOMPILE_LIMIT`` graphs, and beyond them an error naming ``name`` instead of dynamo's
    silent fall-back to eager code. ``allow_rnn`` lets dynamo read an ``nn.LSTM``'s weights (it
    refuses by default)."""
    key_cpu_code_by_vector_isa()
    compiled = torch.compile(
        fn, fullgraph=True, dynamic=False, mode="reduce-overhead" if cuda_graphs else None
    )
    settings = {
        "recompile_limit": RECOMPILE_LIMIT,
        "fail_on_recompile_limit_hit": True,
        **({"allow_rnn": True} if allow_rnn else {}),
    }

    def run(*args: Any) -> Any:
        try:
            with torch._dynamo.config.patch(**settings):
                return compiled(*args)
        except torch._dynamo.exc.FailOnRecompileLimitHit:
            raise RuntimeError(
                f"the compiled {name} met its limit of {RECOMPILE_LIMIT} graphs in this process "
                "(one per shape: agent kind, env copies, data); run fewer kinds of run per process "
                "or set launch.compile_loop off"
            ) from None
        except torch._dynamo.exc.BackendCompilerFailed as err:
            reason = _write_failure(getattr(err, "inner_exception", None) or err.__cause__)
            if reason is None:
                raise
            # A full disk or a file-size limit meets the compiler first, writing its
            # code: one line, as checkpoints do.
            raise ConfigError(
                f"could not write the compiled {name}'s code ({reason}); free disk space where "
                "inductor caches (TORCHINDUCTOR_CACHE_DIR) or set launch.compile_loop off"
            ) from None

    return run


def cudagraph_skips() -> int:
    """How many graphs inductor compiled in this process without the CUDA graphs "reduce-overhead"
    asked for (a CPU tensor, an input it cannot keep at one address, ...): it falls back silently
    but for this counter."""
    return int(torch._dynamo.utils.counters["inductor"]["cudagraph_skips"])


@contextlib.contextmanager
def cuda_graph_capture(graph: torch.cuda.CUDAGraph) -> Iterator[None]:
    """``torch.cuda.graph(graph)`` on a stream of its own, inside a stream context of its own: when
    CUDA refuses a capture, ``torch.cuda.graph``'s exit fails in ``capture_end`` before it restores
    the caller's stream, and this outer context restores it. The error raised then names the first
    failure (a refused operation inside the capture), not ``capture_end``'s "previous error" that
    followed it. Only this thread's CUDA calls are held to the capture's rules ("thread_local", as
    inductor's CUDA graphs are): under DDP, NCCL's watchdog thread polls its events throughout."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with (
            torch.cuda.stream(stream),
            torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"),
        ):
            yield
    except RuntimeError as err:
        first = err.__context__ if isinstance(err.__context__, Exception) else err
        raise RuntimeError(first_line(first)) from err
    torch.cuda.current_stream().wait_stream(stream)


# as OSes word them
WRITE_FAILURES = ("No space left on device", "File size limit exceeded", "Disk quota exceeded")


def _write_failure(cause: BaseException | None) -> str | None:
    """Why a compile could not write its code (inductor's own write, or the C++
    compiler's), else None."""
    if isinstance(cause, OSError):
        return cause.strerror or str(cause)
    return next((words for words in WRITE_FAILURES if words in str(cause)), None)
