"""The GPU-only scripts on a machine without CUDA: each says so, prints its JSON line, and exits 0."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, first_line", [("gpu_check.py", "no CUDA device is visible: nothing to check"),
                                                ("count_syncs.py", "no CUDA device is visible: host syncs")])
def test_a_gpu_script_without_cuda_says_so_and_exits_0(script, first_line):
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin",
           **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}  # where the package is not installed
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--json"], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith(first_line)
    assert json.loads(lines[-1]) == {"cuda": False, "rows": []}
