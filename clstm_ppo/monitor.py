"""GPU statistics through NVML (nvidia-ml-py), logged beside the training metrics; nothing on a CPU."""
from __future__ import annotations

import torch


class GpuMonitor:
    """Utilisation, memory, temperature and power of this worker's GPU; an empty dict when there is none."""

    def __init__(self, device: torch.device):
        self.handle = None
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
        if self.handle is None:
            return {}
        nv, h = self.nvml, self.handle
        util = nv.nvmlDeviceGetUtilizationRates(h)
        memory = nv.nvmlDeviceGetMemoryInfo(h)
        return {
            "gpu_util_pct": float(util.gpu),
            "gpu_mem_used_gb": memory.used / 1e9,
            "gpu_mem_total_gb": memory.total / 1e9,
            "gpu_temp_c": float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            "gpu_power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
        }
