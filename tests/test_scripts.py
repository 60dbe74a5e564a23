"""Every script under scripts/<room>/ is a command and nothing else: read as source (never imported), its top level
only imports, defines and names constants, its ``main`` waits behind ``if __name__ == "__main__":``, and it
answers --help as ``python path --help`` runs it."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import answers_help

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("bench", "ops", "studies")
SCRIPTS = sorted((ROOT / "scripts").glob("*/*.py"))


def is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` and nothing else as its test."""
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
            and len(node.test.comparators) == 1 and isinstance(node.test.comparators[0], ast.Constant)
            and node.test.comparators[0].value == "__main__")


def is_constant(node: ast.stmt) -> bool:
    """An assignment to UPPER_CASE names: a setting the script names once, not work done at import."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return bool(targets) and all(isinstance(t, ast.Name) and t.id.isupper() for t in targets)


def work_at_import(tree: ast.Module) -> list[str]:
    """The top-level statements that would run something when the file is imported."""
    allowed = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
    body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
    return [f"line {node.lineno}: {ast.unparse(node).splitlines()[0]}" for node in body
            if not (isinstance(node, allowed) or is_constant(node) or is_main_guard(node))]


def calls_main(guard: ast.If) -> bool:
    """The guard runs ``main``: calls it, or hands it to a runner such as ``run_cli(main)``."""
    return any(isinstance(n, ast.Name) and n.id == "main" for n in ast.walk(guard))


def test_every_script_lives_in_a_room():
    assert SCRIPTS and {p.parent.name for p in SCRIPTS} <= set(ROOMS)
    loose = list((ROOT / "scripts").glob("*.py"))
    assert not loose, f"{loose}: a script belongs in scripts/bench, scripts/studies or scripts/ops"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_script_defines_a_main_behind_its_guard_and_explains_itself(path, capsys):
    source = path.read_text()
    assert "sys.path" not in source  # the package is imported as installed, never found by editing the path
    tree = ast.parse(source)
    assert ast.get_docstring(tree), "the docstring is the script's --help"
    assert not work_at_import(tree)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
    guards = [n for n in tree.body if is_main_guard(n)]
    assert len(guards) == 1 and guards[0] is tree.body[-1] and calls_main(guards[0])
    assert "usage:" in answers_help([str(path)], capsys)  # as `python path --help` runs it, in this process


def test_the_source_check_finds_work_done_at_import():
    """The check above against scripts whose faults are known: a call at the top level, a loop, a lower-case
    variable; constants, definitions and the guard pass."""
    clean = ast.parse('"""doc"""\nimport os\nLIMIT = len("abc")\ndef main():\n    pass\n'
                      'if __name__ == "__main__":\n    main()\n')
    assert work_at_import(clean) == []
    dirty = ast.parse('"""doc"""\nimport os\nprint("hi")\nfor i in range(2):\n    pass\ncache = {}\n'
                      'if os.environ:\n    pass\n')
    assert [line.split(":")[0] for line in work_at_import(dirty)] == ["line 3", "line 4", "line 6", "line 7"]


def test_a_script_answers_help_in_a_fresh_interpreter():
    """One script as a user starts it from the repository root: a new interpreter, its own folder first on the
    path, the package found as installed."""
    script = ROOT / "scripts" / "studies" / "results_tables.py"
    done = subprocess.run([sys.executable, str(script.relative_to(ROOT)), "--help"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-500:]
