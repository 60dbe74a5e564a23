"""README.md cannot rot: every command its code blocks show runs with --help appended, and it stays short."""
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import answers_help

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def shown_commands() -> list[list[str]]:
    """``python -m clstm_ppo...`` lines of README.md's bash blocks, as argument lists without comments."""
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("python -m clstm_ppo")]


def test_the_readme_is_short_and_shows_the_commands():
    assert len(README.encode()) <= 10 * 1024
    modules = {cmd[2] for cmd in shown_commands()}
    assert {"clstm_ppo.train", "clstm_ppo.evaluate", "clstm_ppo.predict", "clstm_ppo.data",
            "clstm_ppo.scenarios", "clstm_ppo.tune"} <= modules
    for link in re.findall(r"\]\((docs/[^)]+)\)", README):
        assert (ROOT / link).is_file(), link


@pytest.mark.parametrize("command", shown_commands(), ids=lambda c: " ".join(c[2:5]))
def test_every_command_in_the_readme_answers_help(command, capsys):
    """Each shown command as ``python -m ... --help`` runs it, in this process (runpy, as ``-m`` does)."""
    assert "usage:" in answers_help(command[1:], capsys)


def test_a_command_answers_help_in_a_fresh_interpreter():
    """One of them as a user starts it, in a new interpreter from the repository root."""
    done = subprocess.run([sys.executable, "-m", "clstm_ppo.train", "--help"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-2000:]
