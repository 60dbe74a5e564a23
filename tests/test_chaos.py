"""scripts/ops/chaos.py's short version: a random SIGKILL of a random rank (the launcher or either worker) of a
2-worker 8-update run leaves a final state bit-identical to an uninterrupted run's, and each fault (each on a
1-worker run, one of them a SIGKILL mid-write) ends in one line with nothing damaged (docs/RELIABILITY.md has the
long runs: 20 kills at 1 and at 2 workers)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_random_kills_lose_nothing_and_every_fault_is_one_line():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "ops" / "chaos.py"), "--workers", "2", "--kills", "1",
                           "--updates", "8", "--json"], capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "WANDB_MODE": "offline"})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["identical"] == {"2": True}, result["runs"]
    assert all(run["kills"] == 1 and run["finished"] for run in result["runs"])
    assert set(result["faults"]) == {"kill_during_write", "write_fails", "torn_metrics_line", "two_resumes"}
    for name, fault in result["faults"].items():
        assert fault["passed"], (name, fault)
        assert fault["line"] and "\n" not in fault["line"] and "Traceback" not in fault["line"], name


def test_a_resume_moves_the_records_past_its_checkpoint_aside_and_drops_a_torn_line(tmp_path):
    from clstm_ppo.run_files.tracking import tidy_metrics

    path = tmp_path / "metrics.jsonl"
    records = [{"kind": "update", "step": s} for s in (512, 1024, 1536)] + [{"kind": "eval", "step": 1536}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"kind": "update", "st')
    note = tidy_metrics(path, 1024)
    (aside,) = tmp_path.glob("metrics.dropped-*.jsonl")
    assert note.startswith("metrics.jsonl: moved 2 record(s) past step 1,024 (to step 1,536)") and aside.name in note
    assert "1 torn line(s)" in note
    assert [json.loads(line) for line in path.read_text().splitlines()] == records[:2]
    assert [json.loads(line) for line in aside.read_text().splitlines()] == records[2:], "nothing logged is lost"
    assert tidy_metrics(path, 1024) is None, "a tidy file is left alone"


def test_leftovers_of_killed_checkpoint_writes_are_removed(tmp_path):
    from clstm_ppo.run_files.checkpoint import remove_stale_writes

    (tmp_path / ".latest.pt.tmp-123").write_bytes(b"half")
    (tmp_path / "latest.pt").write_bytes(b"whole")
    assert remove_stale_writes(tmp_path) == [".latest.pt.tmp-123"]
    assert [p.name for p in tmp_path.iterdir()] == ["latest.pt"]
