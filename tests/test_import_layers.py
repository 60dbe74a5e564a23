"""Imports run down the data flow: no module of the package imports one of a higher layer (read with Python's ast,
imports inside functions included). The layer order is written here once; a new package must take its place in it."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "clstm_ppo"

# Lowest first. The floor is what every layer may use; then the data flow: bars, their option market, generated
# markets, the env, what a walk measures, the agent, few-shot learning, walking and backtesting policies, starting
# a policy, training it, tuning the trainer.
LAYERS = [
    ("config", "device", "tables", "distributed", "run_files"),
    ("data",),
    ("market",),
    ("scenarios",),
    ("env",),
    ("metrics",),
    ("agent",),
    ("meta",),
    ("backtest",),
    ("pretraining",),
    ("training",),
    ("tuning",),
]
# The commands and the package's root: argparse and one call into the layers, which they may all use.
COMMANDS = ("__init__", "__main__", "cli", "train", "evaluate", "predict", "adapt", "fewshot", "tune", "migrate")
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def layer_of(path: Path) -> tuple[int, str]:
    """(rank, name) of the module at ``path``: its package's (or its own, for a top-level module) layer."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    name = parts[0]
    if parts[-1] == "__main__" or name in COMMANDS:
        return len(LAYERS), name
    assert name in RANK, f"clstm_ppo.{name} has no place in LAYERS: put it where its imports say it belongs"
    return RANK[name], name


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every clstm_ppo import in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"line {node.lineno}: a relative import; write clstm_ppo.<...> in full"
            if node.module and node.module.startswith("clstm_ppo."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("clstm_ppo.")]
    return found


def test_no_module_imports_from_a_higher_layer():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rank, name = layer_of(path)
        for line, module in imported(ast.parse(path.read_text(), str(path))):
            target = module.split(".")[1]
            target_rank = len(LAYERS) if target in COMMANDS else RANK.get(target)
            assert target_rank is not None, f"{path}:{line} imports {module}, of no layer"
            if target_rank > rank:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({name}) imports {module}")
    assert not upward, "imports against the data flow:\n" + "\n".join(upward)


def test_the_check_finds_an_import_against_the_flow():
    """The walker sees an import inside a function, in either form."""
    source = "def f():\n    from clstm_ppo.training.runner import Trainer\n    import clstm_ppo.backtest.walk\n"
    tree = ast.parse(source)
    assert imported(tree) == [(2, "clstm_ppo.training.runner"), (3, "clstm_ppo.backtest.walk")]
    assert RANK["training"] > RANK["env"] and RANK["backtest"] > RANK["agent"]
