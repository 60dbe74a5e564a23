"""Every JSON the commands write is strict: a number that does not exist is null, never NaN or Infinity."""
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from conftest import strict_loads

from clstm_ppo.tables import format_records, strict_json

ROOT = Path(__file__).resolve().parents[1]


def test_missing_numbers_become_null_and_everything_else_survives():
    obj = {"a": math.nan, "b": [1.5, -math.inf, {"c": np.float64("nan")}], "d": np.float32(2.5), "e": torch.tensor(3),
           "f": pd.Timestamp("2020-01-02"), "g": Path("x/y.pt"), "h": True, "i": None, "j": "text"}
    out = strict_loads(strict_json(obj, indent=2, default=str))
    assert out == {"a": None, "b": [1.5, None, {"c": None}], "d": 2.5, "e": 3, "f": "2020-01-02 00:00:00",
                   "g": "x/y.pt", "h": True, "i": None, "j": "text"}


def test_a_printed_table_leaves_a_number_that_does_not_exist_blank():
    """Profit per trade of a run without trades: blank in the table, as None is, never 'nan'."""
    table = format_records([{"run": "a", "profit_per_trade": math.nan, "trades": 0.0, "note": None},
                            {"run": "b", "profit_per_trade": -12.5, "trades": 3.0, "note": "x"}], digits=2)
    assert "nan" not in table
    header, first, second = table.splitlines()
    assert first.split() == ["a", "0.00"] and second.split() == ["b", "-12.50", "3.00", "x"]


def test_no_command_writes_json_but_through_strict_json():
    """json.dumps is left only where it writes no report: a study's cell key, a config's deep copy, a --set value."""
    allowed = {("clstm_ppo/tuning/grid.py", "json.dumps(cell, sort_keys=True)"),
               ("clstm_ppo/backtest/calibration.py", "json.dumps(fit['iv_model_coefs'])"),
               # the regex takes the call's ) too
               ("clstm_ppo/agent/from_checkpoint.py", "json.loads(json.dumps(state.config)))"),
               ("clstm_ppo/agent/from_checkpoint.py", "json.loads(json.dumps(base)))")}
    found = set()
    for path in (ROOT / "clstm_ppo").rglob("*.py"):
        for match in re.finditer(r"json\.loads\(json\.dumps\([^)]*\)+|json\.dumps\([^)]*\)", path.read_text()):
            found.add((str(path.relative_to(ROOT)), match.group(0)))
    found = {(p, m) for p, m in found if p != "clstm_ppo/tables.py"}
    assert found <= allowed, found - allowed
