"""GPU statistics through NVML, with a stand-in NVML: handles by UUID, and a failing query never ends a run."""
from types import SimpleNamespace

import torch

from clstm_ppo.training.monitor import ResourceMonitor, per_rank_gpu


class FakeNVML:
    """The parts of pynvml the monitor uses; ``fail`` names a query that raises like NVMLError_NotSupported."""
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, fail: str = ""):
        self.fail, self.asked_for, self.queries = fail, None, 0

    def _query(self, name, value):
        self.queries += 1
        if name == self.fail:
            raise RuntimeError("Not Supported")
        return value

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.asked_for = uuid
        return "handle"

    def nvmlDeviceGetUtilizationRates(self, handle):
        return self._query("util", SimpleNamespace(gpu=87))

    def nvmlDeviceGetMemoryInfo(self, handle):
        return self._query("memory", SimpleNamespace(used=3e9, total=80e9))

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return self._query("temperature", 61)

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._query("power", 312_000)


def test_the_gpu_is_found_by_uuid_and_reported():
    nvml = FakeNVML()
    monitor = ResourceMonitor(torch.device("cuda", 1), nvml=nvml, uuid="GPU-1234")
    assert nvml.asked_for == "GPU-1234", "NVML's index order differs from CUDA's under CUDA_VISIBLE_DEVICES"
    assert monitor.gpu() == {"gpu_util_pct": 87.0, "gpu_mem_used_gb": 3.0, "gpu_mem_total_gb": 80.0,
                             "gpu_temp_c": 61.0, "gpu_power_w": 312.0}
    assert monitor.off_reason == ""


def test_a_failing_nvml_query_turns_monitoring_off_with_one_reason_and_never_raises():
    nvml = FakeNVML(fail="temperature")  # e.g. a MIG slice or a board without a sensor
    monitor = ResourceMonitor(torch.device("cuda", 0), nvml=nvml, uuid="GPU-1")
    assert monitor.gpu() == {}
    assert monitor.off_reason.startswith("GPU monitoring off: NVML said RuntimeError: Not Supported")
    asked = nvml.queries
    assert monitor.gpu() == {} and nvml.queries == asked, "no more queries once off"
    assert set(monitor.host()) == {"cpu_util_pct", "max_rss_mb"}, "the host statistics go on"


def test_no_gpu_no_nvml_and_every_ranks_gpu_in_one_record():
    assert ResourceMonitor(torch.device("cpu")).gpu() == {}
    broken = ResourceMonitor(torch.device("cuda", 0), nvml=SimpleNamespace(nvmlInit=lambda: 1 / 0))
    assert broken.gpu() == {} and "ZeroDivisionError" in broken.off_reason
    record = per_rank_gpu([{"gpu_util_pct": 50.0}, {"gpu_util_pct": 70.0, "gpu_power_w": 200.0}])
    assert record == {"gpu0_util_pct": 50.0, "gpu1_util_pct": 70.0, "gpu1_power_w": 200.0}
