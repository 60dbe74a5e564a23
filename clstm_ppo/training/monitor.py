"""Resource statistics logged beside the training metrics: the host process, and each rank's
GPU through NVML."""

from __future__ import annotations

import resource
import time
from typing import Any

import torch

from clstm_ppo.config import first_line


def cuda_uuid(device: torch.device) -> str:
    """NVML's name for a CUDA device. CUDA's index is not NVML's under
    CUDA_VISIBLE_DEVICES; the UUID is."""
    return f"GPU-{torch.cuda.get_device_properties(device).uuid}"


class ResourceMonitor:
    """Host: CPU use and peak memory of this process. GPU (when there is one): utilisation, memory,
    temperature and power through NVML (nvidia-ml-py). Monitoring is never worth a run: the first
    NVML failure (no driver library, MIG slices, boards without a sensor) turns GPU monitoring off
    and leaves one line in ``off_reason`` for the caller to print."""

    def __init__(self, device: torch.device, nvml: Any = None, uuid: str | None = None):
        self.handle, self.nvml, self.off_reason = None, None, ""
        self.last_wall, self.last_cpu = time.perf_counter(), time.process_time()
        if device.type != "cuda":
            return
        try:
            if nvml is None:
                import pynvml as nvml  # from nvidia-ml-py
            nvml.nvmlInit()
            self.nvml = nvml
            self.handle = nvml.nvmlDeviceGetHandleByUUID(uuid or cuda_uuid(device))
        except Exception as err:  # noqa: BLE001
            # any NVML or import failure means: no GPU statistics
            self._turn_off(err)

    def _turn_off(self, err: BaseException) -> None:
        self.handle = None
        self.off_reason = (
            f"GPU monitoring off: NVML said {type(err).__name__}: {first_line(err, 100)}"
        )

    def host(self) -> dict[str, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        out = {
            "cpu_util_pct": 100.0
            * (cpu - self.last_cpu)
            / max(wall - self.last_wall, 1e-9),  # 200 = 2 cores
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        }  # Linux reports KiB
        self.last_wall, self.last_cpu = wall, cpu
        return out

    def gpu(self) -> dict[str, float]:
        """This process's GPU now, or {} (no GPU, or monitoring turned off)."""
        if self.handle is None:
            return {}
        nv, h = self.nvml, self.handle
        try:
            util = nv.nvmlDeviceGetUtilizationRates(h)
            memory = nv.nvmlDeviceGetMemoryInfo(h)
            return {
                "gpu_util_pct": float(util.gpu),
                "gpu_mem_used_gb": memory.used / 1e9,
                "gpu_mem_total_gb": memory.total / 1e9,
                "gpu_temp_c": float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                "gpu_power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
            }
        except Exception as err:  # noqa: BLE001 - e.g. NVMLError_NotSupported on a MIG slice
            self._turn_off(err)
            return {}


def per_rank_gpu(stats: list[dict[str, float]]) -> dict[str, float]:
    """Every rank's GPU statistics as one record: gpu0_util_pct, gpu1_util_pct, ..."""
    return {
        key.replace("gpu_", f"gpu{rank}_", 1): value
        for rank, one in enumerate(stats)
        for key, value in one.items()
    }
