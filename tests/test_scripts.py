"""Every script under scripts/ imports as a module (no sys.path edits, no work at import) and answers --help."""
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import answers_help, load_script

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "scripts").glob("*/*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_a_script_imports_without_path_edits_and_explains_itself(path, capsys):
    assert "sys.path" not in path.read_text()
    module = load_script(path)  # defines, runs nothing: main() waits behind __name__ == "__main__"
    assert callable(module.main) and module.__doc__
    assert "usage:" in answers_help([str(path)], capsys)  # as `python path --help` runs it, in this process


def test_a_script_answers_help_in_a_fresh_interpreter():
    """One script as a user starts it: a new interpreter, no package path set up for it."""
    done = subprocess.run([sys.executable, str(SCRIPTS[0]), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-500:]
