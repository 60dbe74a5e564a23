"""The smoke config trained through the command's own entry point, as a user runs it: the training tests share it
(test_train.py, test_resume.py, test_train_failures.py)."""
from pathlib import Path

from clstm_ppo.cli import run_cli
from clstm_ppo.train import main as train_main

SMOKE = "smoke"


def train(tmp: Path, *extra: str) -> int:
    return run_cli(train_main, ["--config", SMOKE, "--checkpoint-dir", str(tmp), *extra])
