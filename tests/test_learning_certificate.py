"""The learning certificate's study on the planted-edge market (docs/ENVIRONMENT.md, "The planted-edge market"): the
share of the oracle's edge a run captures, and the study command's refusals."""
import importlib.util
import math
from pathlib import Path

import pytest

from clstm_ppo.studies.learning_certificate import capture


def test_capture_is_the_share_of_the_oracles_edge():
    assert capture(1.0, 0.5, 1.5) == pytest.approx(0.5)
    assert capture(0.5, 0.5, 1.5) == 0.0 and capture(1.5, 0.5, 1.5) == 1.0
    assert math.isnan(capture(1.0, 0.5, 0.5))  # no edge to share


def study_main():
    path = Path(__file__).parents[1] / "scripts" / "studies" / "learning_certificate.py"
    spec = importlib.util.spec_from_file_location("learning_certificate_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.mark.parametrize("argv, words", [(["--strengths", "-1"], "--strengths must be >= 0"),
                                         (["--budgets", "0"], "--budgets > 0"),
                                         (["--set", "train.no_such=1"], "no_such")])
def test_the_study_refuses_bad_input_in_one_line_before_training(argv, words, tmp_path, capsys):
    rows = tmp_path / "rows.csv"
    try:
        code = study_main()([*argv, "--out", str(tmp_path / "runs"), "--rows", str(rows)])
    except SystemExit as stop:  # argparse's own errors
        code = stop.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and words in err[-1]
    assert not rows.exists() and not (tmp_path / "runs").exists()
