"""The docs cannot rot: every command README.md's code blocks show runs with --help appended, every doc stays within
its budget (a newcomer reads reference, not a lab notebook), and docs/RESULTS.md's tables are what the grids' rows
under docs/data/grids/ give (scripts/studies/results_tables.py). The one test that reads numbers out of a doc."""
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


def test_the_readme_shows_the_commands():
    modules = {cmd[2] for cmd in shown_commands()}
    assert {"clstm_ppo.train", "clstm_ppo.evaluate", "clstm_ppo.predict", "clstm_ppo.data",
            "clstm_ppo.scenarios", "clstm_ppo.tune"} <= modules
    for link in re.findall(r"\]\((docs/[^)]+)\)", README):
        assert (ROOT / link).is_file(), link


# Kilobytes a doc may hold: README a short tour with its headline table, RESULTS the questions and their current
# answers, BENCHMARKS one current table per machine; every other doc is reference of at most 20 KB.
BUDGETS_KB = {"README.md": 10, "docs/RESULTS.md": 25, "docs/BENCHMARKS.md": 20}
OTHER_DOC_KB = 20


def test_every_doc_is_within_its_budget():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    over = {str(p.relative_to(ROOT)): round(p.stat().st_size / 1024, 1) for p in docs
            if p.stat().st_size > 1024 * BUDGETS_KB.get(str(p.relative_to(ROOT)), OTHER_DOC_KB)}
    assert not over, f"docs over their budget (KB): {over}; git keeps the history, the doc keeps the answer"


@pytest.mark.parametrize("doc", ["RESULTS.md", "SCENARIOS.md"])
def test_the_results_tables_are_what_the_grids_give(doc):
    """Each ``<!-- table NAME -->`` block of the doc is scripts/studies/results_tables.py's output for NAME from
    docs/data/grids/*.csv: the doc shows the data, and an edit of either without the other fails here."""
    from clstm_lab.studies.results_tables import BLOCK, load_grids, load_verdicts, refreshed

    text = (ROOT / "docs" / doc).read_text()
    assert len(BLOCK.findall(text)) >= (3 if doc == "RESULTS.md" else 1), f"{doc} shows its answers as grid tables"
    data = ROOT / "docs" / "data"
    assert refreshed(text, load_grids(data / "grids"), load_verdicts(data / "verdict")) == text, \
        f"run python scripts/studies/results_tables.py --doc docs/{doc} --write"


@pytest.mark.parametrize("command", shown_commands(), ids=lambda c: " ".join(c[2:5]))
def test_every_command_in_the_readme_answers_help(command, capsys):
    """Each shown command as ``python -m ... --help`` runs it, in this process (runpy, as ``-m`` does)."""
    assert "usage:" in answers_help(command[1:], capsys)


def test_a_command_answers_help_in_a_fresh_interpreter():
    """One of them as a user starts it, in a new interpreter from the repository root."""
    done = subprocess.run([sys.executable, "-m", "clstm_ppo.train", "--help"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-2000:]


def test_the_python_use_shown_binds_to_the_library():
    """README's Python block imports what it names, and each library call it makes binds to the function's real
    signature (the block itself trains: docs/BENCHMARKS.md times it; here nothing runs)."""
    import ast
    import importlib
    import inspect

    block = re.search(r"```python\n(.*?)```", README, flags=re.S)
    assert block, "README shows the library's use from Python"
    tree = ast.parse(block.group(1))
    functions = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module)
            functions |= {alias.name: getattr(module, alias.name) for alias in node.names}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id in functions]
    assert {c.func.id for c in calls} == set(functions), "every imported function is called"
    for call in calls:  # positions and names are what is checked; the values are the block's to run
        inspect.signature(functions[call.func.id]).bind(*call.args, **{k.arg: None for k in call.keywords})
    # and every other library call the section names (package.module.function under clstm_ppo) exists
    named = re.findall(r"`((?:[a-z_]+\.)+[a-z_]+)`", README.split("## From Python")[1].split("\n## ")[0])
    assert len(named) >= 4
    for dotted in named:
        module, name = dotted.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(f"clstm_ppo.{module}"), name)), dotted
