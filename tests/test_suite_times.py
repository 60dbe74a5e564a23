"""The suite's per-test times as benchmark rows (lab/clstm_lab/bench/suite_times.py): read from pytest's own JUnit XML,
the CPU named by the instruction set that decides its speed."""
import subprocess
import sys
from pathlib import Path

import pytest

from clstm_lab.bench.suite_times import cpu_label, read_test_times, suite_rows

ROOT = Path(__file__).resolve().parents[1]


def junit(tmp_path: Path) -> Path:
    """A real JUnit file: pytest run on three tiny tests, one of them parametrized."""
    (tmp_path / "test_tiny.py").write_text(
        "import time, pytest\n"
        "def test_slow():\n    time.sleep(0.3)\n"
        "@pytest.mark.parametrize('n', [1, 2])\ndef test_fast(n):\n    assert n\n")
    out = tmp_path / "suite.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={out}",
                    str(tmp_path / "test_tiny.py")], cwd=tmp_path, check=True, capture_output=True)
    return out


def test_times_are_read_per_test_and_the_slowest_come_first(tmp_path):
    times = read_test_times(junit(tmp_path))
    assert sorted(times) == ["test_tiny.py::test_fast[1]", "test_tiny.py::test_fast[2]", "test_tiny.py::test_slow"]
    assert times["test_tiny.py::test_slow"] >= 0.3 > times["test_tiny.py::test_fast[1]"]
    rows = suite_rows(times, 12.5, "a machine", "abc1234", "2026-11-28", slowest=2)
    assert [r["value"] for r in rows[:1]] == [12.5] and rows[1]["value"] == pytest.approx(sum(times.values()), abs=0.1)
    assert [r["setting"] for r in rows[2:]] == ["test_tiny.py::test_slow", rows[3]["setting"]]
    assert {tuple(r) for r in rows} == {("benchmark", "machine", "command", "commit", "date", "setting", "value",
                                         "unit")}


def test_the_cpu_is_named_by_its_vector_instruction_set(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: Some CPU\nflags\t\t: fpu avx avx2 avx512f avx512_bf16\n")
    assert "Some CPU (AVX-512 with bf16;" in cpu_label(info, capability="")
    assert "(AVX-512 with bf16, held to avx2 by ATEN_CPU_CAPABILITY;" in cpu_label(info, capability="avx2")
    info.write_text("model name\t: Some CPU\nflags\t\t: fpu avx avx2\n")
    assert "(AVX2 only;" in cpu_label(info, capability="avx2")


def test_a_file_that_is_not_junit_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "suite.xml"
    bad.write_text("not xml")
    run = subprocess.run([sys.executable, "scripts/bench/suite_times.py", str(bad), "--wall", "1"], cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.startswith("error: ") and "run pytest with --junitxml" in run.stderr
    assert run.stderr.count("\n") == 1
