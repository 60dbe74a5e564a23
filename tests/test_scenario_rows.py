"""scripts/studies/scenario_rows.py: a report's numbers become rows beside the repository's own (docs/data/scenarios,
whatever directory the command runs from), and the docs' tables are printed from the latest rows."""
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "studies" / "scenario_rows.py"


def _row():
    return {"discriminative_score": 0.1, "discriminative_score_strict": 0.2, "predictive_score": 0.4,
            "emd": {"1": 0.001, "5": 0.002, "20": 0.003, "100": 0.004}, "acf_score": {"r": 0.1, "abs": 0.2, "sq": 0.3},
            "leverage_score": 0.3, "kurtosis": 9.0, "skew": -0.5, "kurtosis_per_path_median": 1.5,
            "at_held_out_length": {"length": 1510, "acf_score": {"abs": 0.5}, "leverage_score": 0.4,
                                   "kurtosis_per_path_median": 4.0, "held_out_kurtosis_percentile": 0.4},
            "drift": {"ratio_min": [0.8], "ratio_max": [1.5]}, "train_seconds": 300.0, "sample_seconds": 0.7}


def test_rows_land_in_the_repository_s_docs_data_and_tables_read_them(tmp_path):
    report = {"generator": "wgan_gp", "steps": 3000, "judge_runs": 10, "judge_iters": 2000,
              "real_held_out": {"kurtosis": 3.65, "kurtosis_per_series_median": 3.65},
              **{k: _row() for k in ("model", "garch_t", "bootstrap", "fhs")},
              "verdict": {k: {"tails": {"pass": True}} for k in ("model", "garch_t", "bootstrap", "fhs")}}
    # clusters more than GARCH-t on 252-bar paths, less on paths as long as the held-out series (which decide)
    report["model"]["acf_score"]["abs"], report["model"]["at_held_out_length"]["acf_score"]["abs"] = 0.9, 0.3
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    out = subprocess.run([sys.executable, str(SCRIPT), "add", "--report", str(path), "--data", "toy", "--command", "c",
                          "--rows", str(tmp_path / "rows")], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert "4 model rows" in out.stdout
    rows = [json.loads(line) for line in (tmp_path / "rows" / "reports.jsonl").read_text().splitlines()]
    assert [r["model"] for r in rows] == ["wgan_gp", "garch_t", "bootstrap", "fhs"]
    assert rows[0]["like_kurtosis_path_median"] == 4.0 and rows[0]["held_kurtosis_series_median"] == 3.65
    tables = subprocess.run([sys.executable, str(SCRIPT), "tables", "--rows", str(tmp_path / "rows")],
                            capture_output=True, text=True, check=True).stdout
    assert "| toy | wgan_gp | 10x2000 | 0.100 |" in tables
    assert "| toy | wgan_gp | pass | – | pass | FAIL |" in tables  # acf |r| 0.3 < 0.5; leverage 0.4, not below 0.4
    assert "| toy | fhs | pass | – | FAIL | FAIL |" in tables
    # the default rows are the repository's docs/data/scenarios, not a folder beside the script
    help_text = subprocess.run([sys.executable, "-c", f"import runpy; m = runpy.run_path({str(SCRIPT)!r}); "
                                "print(m['ROWS'])"], capture_output=True, text=True, check=True).stdout.strip()
    assert Path(help_text) == SCRIPT.parents[2] / "docs" / "data" / "scenarios"
