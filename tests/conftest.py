import json
import os
import sys

import numpy as np
import pandas as pd
import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
# The suite checks the CPU path, which every device shares, and means the same on a GPU machine as on CI:
# without this, `--device auto` picks the GPU there and tests of CPU-only behaviour (fp16 refused on a CPU,
# "1 worker(s) on cpu", a CUDA checkpoint resumed on a machine without one) fail. scripts/ops/gpu_check.py
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


# The two markets the env, reward, market-input and functional-step tests share, built once per module.
@pytest.fixture(scope="module")
def synthetic_data():
    from clstm_ppo.config import DataConfig, SyntheticConfig
    from clstm_ppo.data import build_market_data
    return build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=1500, seed=5)))


@pytest.fixture(scope="module")
def sp500_data():
    from clstm_ppo.config import DataConfig
    from clstm_ppo.data import build_market_data
    return build_market_data(DataConfig())


def strict_loads(text: str):
    """json.loads that refuses NaN and Infinity: what the project's commands write must be strict JSON."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON: a command wrote a number that does not exist")
    return json.loads(text, parse_constant=refuse)


def answers_help(argv: list[str], capsys) -> str:
    """What ``python <argv> --help`` prints, run in this process (a new interpreter costs seconds of imports):
    ``argv`` is ``["-m", "module", ...]`` or ``["path/to/script.py", ...]``, run as ``__main__`` with its own argv."""
    import runpy
    import warnings

    target, rest = (argv[1], argv[2:]) if argv[0] == "-m" else (argv[0], argv[1:])
    saved = sys.argv
    sys.argv = [target, *rest, "--help"]
    try:
        with pytest.raises(SystemExit) as done, warnings.catch_warnings():
            # runpy's note that a module the tests imported already is run again as __main__: that is the point
            warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
            if argv[0] == "-m":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
    finally:
        sys.argv = saved
    assert done.value.code in (0, None), capsys.readouterr().err[-2000:]
    return capsys.readouterr().out


# Each pytest-xdist worker on a core of its own, and with it every process it starts (the trainer counts the cores
# it may use): two workers each running a two-thread trainer oversubscribed the two cores, and OpenMP threads
# spinning at their barriers made some tests ten times slower than in one process.
def pin_xdist_worker() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...
    if worker is not None and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[int(worker.removeprefix("gw")) % len(cores)]})


def pytest_configure(config: pytest.Config) -> None:
    pin_xdist_worker()


# make test runs two pytest-xdist workers with --dist loadgroup. Each group below runs whole, in file order, on one
# worker: "inductor" holds every test that compiles, so inductor's on-disk cache built by the first compile of a
# graph serves the later ones (two workers compiling the same graphs cold compile them twice); "processes" holds the
# tests that start two or more processes, one after another on the other worker's core. The other tests go to
# whichever worker is free. A new test that compiles belongs in "inductor".
INDUCTOR_MODULES = {"test_compile_cache.py", "test_functional_step.py", "test_fused_rollout.py",
                    "test_static_update.py", "test_train.py", "test_resume.py",
                    "test_train_failures.py"}
PROCESS_MODULES = {"test_distributed.py", "test_chaos.py", "test_tune.py", "test_tune_storage.py",
                   "test_tune_vs_default.py", "test_reproduce_paper.py"}


def xdist_group_of(item: pytest.Item) -> str | None:
    module = item.path.name
    if module in INDUCTOR_MODULES or (module == "test_distributed.py" and "compiled" in item.name):
        return "inductor"
    return "processes" if module in PROCESS_MODULES else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    groups = {item.nodeid: xdist_group_of(item) for item in items}
    for item in items:
        if groups[item.nodeid] is not None:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    # Two ranks compiling the same graphs cold compile them twice: let them come last, when the cache has them.
    items.sort(key=lambda item: item.path.name == "test_distributed.py" and groups[item.nodeid] == "inductor")
