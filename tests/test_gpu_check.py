"""scripts/gpu_check.py on a machine without CUDA: it says so, prints its JSON line, and exits 0."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_without_cuda_says_so_and_exits_0():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--json"], capture_output=True,
                          text=True, timeout=120, env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("no CUDA device is visible")
    assert json.loads(lines[-1]) == {"cuda": False, "rows": []}
