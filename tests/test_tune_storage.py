"""Studies shared between processes: two tune workers on one PostgreSQL study (a real server, started here
from Debian's postgresql package; skipped with the reason where it is missing), and reproduce_paper.py's
grid shared by two processes through one SQLite study."""
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SPACE = {"params": {"ppo.learning_rate": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
                    "train.num_envs": {"type": "categorical", "choices": [8, 16]}}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url():
    """A throwaway PostgreSQL cluster on a loopback port; the URL of its 'postgres' database."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    initdb = bins[-1] if bins else shutil.which("initdb")
    if initdb is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql; .ci/run does it as root)")
    bindir = Path(initdb).parent
    folder = tempfile.mkdtemp(prefix="clstm-pg-")
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root: run it as the package's postgres user
        if shutil.which("runuser") is None or subprocess.run(["id", "postgres"], capture_output=True).returncode:
            pytest.skip("running as root, and there is no postgres user (or runuser) to start the server as")
        shutil.chown(folder, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = f"{folder}/data", free_port()
    made = subprocess.run([*as_user, str(bindir / "initdb"), "-D", data, "-A", "trust", "-U", "tune"],
                          capture_output=True, text=True, timeout=120)
    if made.returncode:
        pytest.skip(f"initdb failed: {made.stderr.strip().splitlines()[-1:]}")
    started = subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", data, "-w", "-t", "60", "-l", f"{folder}/log",
                              "-o", f"-p {port} -k {folder} -c listen_addresses=127.0.0.1", "start"],
                             capture_output=True, text=True, timeout=120)
    if started.returncode:
        pytest.skip(f"the PostgreSQL server did not start: {started.stderr.strip()[-300:]}")
    try:
        yield f"postgresql://tune@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", data, "-m", "fast", "stop"], capture_output=True,
                       timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_two_processes_join_one_postgres_study_and_record_each_trial_once(tmp_path, postgres_url):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    command = [sys.executable, "-m", "clstm_ppo.tune", "--config", "smoke", "--set", "train.eval_every=1",
               "--trials", "4", "--steps", "1024", "--space", str(space), "--storage", postgres_url, "--study", "pg"]
    workers = [subprocess.Popen([*command, "--out", str(tmp_path / f"w{i}")], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=tmp_path) for i in range(2)]
    outputs = [w.communicate(timeout=600) for w in workers]
    for w, (out, err) in zip(workers, outputs, strict=True):
        assert w.returncode == 0, out[-2000:] + err[-3000:]
    trials = optuna.load_study(study_name="pg", storage=postgres_url).get_trials()
    numbers = [t.number for t in trials]
    # two workers that finish at the same instant may start one trial more than asked, never fewer
    assert sorted(numbers) == list(range(len(trials))) and len(trials) in (4, 5)
    assert all(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for t in trials)
    ran_by = {}
    for i in range(2):
        for folder in (tmp_path / f"w{i}" / "trials").glob("trial*-seed0"):
            number = int(folder.name[5:9])
            assert number not in ran_by, f"trial {number} ran in both workers"
            ran_by[number] = i
    assert sorted(ran_by) == sorted(numbers) and set(ran_by.values()) == {0, 1}  # both workers took part
    for out, _ in outputs:
        assert f"{len(trials)} trial(s)" in out and "best: trial" in out


@pytest.mark.slow
def test_reproduce_paper_shares_its_grid_through_a_storage(tmp_path):
    url = f"sqlite:///{tmp_path / 'grid.db'}"
    command = [sys.executable, str(ROOT / "scripts" / "studies" / "reproduce_paper.py"), "--config", "smoke", "--data",
               "synthetic", "--steps", "512", "--seeds", "1", "--kinds", "clstm", "mlp", "--rewards", "equity",
               "--windows", "10", "--storage", url, "--json", "--set", "train.num_envs=8",
               "--set", "train.eval_every=1"]
    workers = [subprocess.Popen([*command, "--out", str(tmp_path / f"runs{i}"), "--grid-dir",
                                 str(tmp_path / f"grids{i}")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=tmp_path) for i in range(2)]
    outputs = [w.communicate(timeout=900) for w in workers]
    for w, (out, err) in zip(workers, outputs, strict=True):
        assert w.returncode == 0, out[-2000:] + err[-3000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert results[0]["per_run"] == results[1]["per_run"] and len(results[0]["per_run"]) == 2
    trials = optuna.load_study(study_name="reproduce-synthetic", storage=url).get_trials()
    cells = [t.user_attrs["cell"] for t in trials]
    assert len(cells) == 2 and len(set(cells)) == 2  # each (kind, reward, window, seed, fold) ran once, in one process
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    mine = [sum(1 for line in out.splitlines() if line.startswith("== grid")) for out, _ in outputs]
    assert sum(mine) == 2 and min(mine) >= 1  # each process ran one cell and gathered both
