"""The test suite's time on this CPU, test by test, as benchmark rows (docs/BENCHMARKS.md,
docs/data/benchmarks/tests.csv)."""
from __future__ import annotations

import os
import platform
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path
from typing import Any

from clstm_ppo.config import ConfigError


def read_test_times(junit: Path) -> dict[str, float]:
    """Seconds per test (setup, call and teardown) from pytest's ``--junitxml`` file, by ``file::name``."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as err:
        raise ConfigError(f"{junit}: not a JUnit XML file pytest wrote ({err}); run pytest with --junitxml") from None
    times: dict[str, float] = {}
    for case in root.iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        key = f"{module}.py::{case.get('name')}"
        times[key] = times.get(key, 0.0) + float(case.get("time", 0.0))
    if not times:
        raise ConfigError(f"{junit}: holds no test case; run pytest with --junitxml on the suite")
    return times


def cpu_label(cpuinfo: Path = Path("/proc/cpuinfo"), capability: str | None = None) -> str:
    """The CPU as the suite's speed depends on it: its model, cores, and the vector ISA ATen and oneDNN use
    (``capability``, default ``$ATEN_CPU_CAPABILITY``: an AVX-512 CPU held to AVX2 says so)."""
    text = cpuinfo.read_text() if cpuinfo.exists() else ""
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")),
                 platform.processor() or platform.machine())
    isa = ("AVX-512" + (" with bf16" if "avx512_bf16" in flags else "")) if "avx512f" in flags else \
        ("AVX2 only" if "avx2" in flags else "no AVX2")
    held = os.environ.get("ATEN_CPU_CAPABILITY", "") if capability is None else capability
    if "avx512f" in flags and held in ("avx2", "default"):
        isa += f", held to {held} by ATEN_CPU_CAPABILITY"
    return f"{os.cpu_count()}-core {model} ({isa}; torch {version('torch')})"


def suite_rows(times: dict[str, float], wall_s: float, machine: str, commit: str, date: str,
               slowest: int) -> list[dict[str, Any]]:
    """Rows of the benchmarks table: the suite's wall and summed seconds, then its ``slowest`` tests."""
    command = "make test PYTEST_ARGS=--junitxml=F; python scripts/bench/suite_times.py F --wall S"
    base = {"benchmark": "test suite", "machine": machine, "command": command, "commit": commit, "date": date}
    rows = [{**base, "setting": f"{len(times)} tests; pytest wall, two workers", "value": round(wall_s, 1),
             "unit": "s"},
            {**base, "setting": f"{len(times)} tests; sum of test times", "value": round(sum(times.values()), 1),
             "unit": "s"}]
    for name, seconds in sorted(times.items(), key=lambda kv: -kv[1])[:slowest]:
        rows.append({**base, "benchmark": "test", "setting": name, "value": round(seconds, 1), "unit": "s"})
    return rows
