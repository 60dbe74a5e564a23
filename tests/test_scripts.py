"""Every script under scripts/ imports as a module (no sys.path edits, no work at import) and answers --help."""
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "scripts").glob("*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_a_script_imports_without_path_edits_and_explains_itself(path):
    assert "sys.path" not in path.read_text()
    module = load_script(path)  # defines, runs nothing: main() waits behind __name__ == "__main__"
    assert callable(module.main) and module.__doc__
    done = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-500:]
