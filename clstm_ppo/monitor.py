"""Resource statistics logged beside the training metrics: the host process, and the GPU through NVML."""
from __future__ import annotations

import resource
import time

import torch


class ResourceMonitor:
    """Host: CPU use and peak memory of this process. GPU (when there is one): utilisation, memory,
    temperature and power through NVML (nvidia-ml-py)."""

    def __init__(self, device: torch.device):
        self.handle = None
        self.last_wall, self.last_cpu = time.perf_counter(), time.process_time()
        if device.type != "cuda":
            return
        try:
            import pynvml  # from nvidia-ml-py

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        except Exception:  # no driver library or no permission: monitoring is optional, training is not
            self.handle = None

    def read(self) -> dict[str, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        host = {"cpu_util_pct": 100.0 * (cpu - self.last_cpu) / max(wall - self.last_wall, 1e-9),  # 200 = 2 cores
                "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}  # Linux reports KiB
        self.last_wall, self.last_cpu = wall, cpu
        if self.handle is None:
            return host
        nv, h = self.nvml, self.handle
        util = nv.nvmlDeviceGetUtilizationRates(h)
        memory = nv.nvmlDeviceGetMemoryInfo(h)
        return {
            **host,
            "gpu_util_pct": float(util.gpu),
            "gpu_mem_used_gb": memory.used / 1e9,
            "gpu_mem_total_gb": memory.total / 1e9,
            "gpu_temp_c": float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            "gpu_power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
        }
