"""Rows appended to the studies' and benchmarks' CSVs (clstm_ppo.tables.append_rows): each value under its column."""
import csv

from clstm_ppo.tables import append_rows


def test_appended_rows_keep_each_value_under_its_own_column(tmp_path):
    """A row with a column the file lacks widens the file (older rows empty there) instead of shifting values under
    other names; a row lacking a column leaves it empty."""
    path = tmp_path / "rows.csv"
    append_rows(path, [{"seed": 0, "sharpe": 0.5, "commit": "a"}])
    append_rows(path, [{"seed": 1, "sharpe": 0.7, "timing": 0.3, "commit": "b"}])
    append_rows(path, [{"commit": "c", "seed": 2}])
    rows = list(csv.DictReader(path.open(newline="")))
    assert list(rows[0]) == ["seed", "sharpe", "commit", "timing"]
    assert rows == [{"seed": "0", "sharpe": "0.5", "commit": "a", "timing": ""},
                    {"seed": "1", "sharpe": "0.7", "commit": "b", "timing": "0.3"},
                    {"seed": "2", "sharpe": "", "commit": "c", "timing": ""}]
