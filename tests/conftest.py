import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
# The suite checks the CPU path, which every device shares, and means the same on a GPU machine as on CI:
# without this, `--device auto` picks the GPU there and tests of CPU-only behaviour (fp16 refused on a CPU,
# "1 worker(s) on cpu", a CUDA checkpoint resumed on a machine without one) fail. scripts/gpu_check.py
# is the check that runs on CUDA; set CLSTM_PPO_TEST_GPU=1 to let the suite see the GPUs anyway.
if os.environ.get("CLSTM_PPO_TEST_GPU") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
torch.set_num_threads(1)  # two test processes on two cores: one thread each is much faster


def make_bars(n: int = 400, seed: int = 0, start: str = "2001-01-01") -> pd.DataFrame:
    """Plain random-walk OHLCV bars with the capitalised column names a Yahoo export has."""
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, n)))
    open_ = close * np.exp(rng.normal(0, 0.002, n))
    return pd.DataFrame({
        "Date": pd.bdate_range(start, periods=n).strftime("%Y-%m-%d"),
        "Open": open_,
        "High": np.maximum(open_, close) * 1.005,
        "Low": np.minimum(open_, close) * 0.995,
        "Close": close,
        "Volume": rng.integers(1_000_000, 2_000_000, n),
    })


@pytest.fixture
def bars_csv(tmp_path):
    path = tmp_path / "ABC.csv"
    make_bars().to_csv(path, index=False)
    return path


def strict_loads(text: str):
    """json.loads that refuses NaN and Infinity: what the project's commands write must be strict JSON."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON: a command wrote a number that does not exist")
    return json.loads(text, parse_constant=refuse)


def load_script(path: Path) -> ModuleType:
    """A script under scripts/ as a module, imported as Python imports one: registered in sys.modules while its
    body runs (a dataclass looks its module up there)."""
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module
