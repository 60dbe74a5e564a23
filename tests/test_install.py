"""The named configs live once, in the top-level configs/ (clstm_ppo/config/named links to it), and are found by
name from any folder after a wheel is built and installed; the wheel holds the trainer and not the lab."""
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_configs_are_one_top_level_copy_that_a_built_wheel_carries(tmp_path):
    named = ROOT / "clstm_ppo" / "config" / "named"
    assert named.is_symlink() and named.resolve() == (ROOT / "configs").resolve()
    shipped = ["contracts.yaml", "default.yaml", "paper.yaml", "planted.yaml", "smoke.yaml"]
    assert sorted(p.name for p in (ROOT / "configs").glob("*.yaml")) == shipped
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(tmp_path / "wheel")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    site = tmp_path / "site"
    wheel = next((tmp_path / "wheel").glob("clstm_ppo-*.whl"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                           str(site), str(wheel)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    files = [Path(info.filename) for info in zipfile.ZipFile(wheel).infolist()]
    assert set(shipped) <= {p.name for p in files}
    # The wheel is the trainer and its commands: the studies and benchmarks stay in the repository's lab/.
    assert not [p for p in files if p.parts[0] == "clstm_lab" or p.parts[1:2] in (("studies",), ("bench",))]
    assert any(p.parts[:2] == ("clstm_ppo", "train.py") for p in files)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = ("import clstm_ppo; from clstm_ppo.config import load_config, named_configs; "
             "print(clstm_ppo.__file__); print(named_configs()); print(load_config('paper').agent.lstm2_hidden)")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=elsewhere,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-2000:]
    where, names, hidden = run.stdout.strip().splitlines()
    assert where.startswith(str(site)) and names == str([p.removesuffix('.yaml') for p in shipped]) and hidden == "512"
