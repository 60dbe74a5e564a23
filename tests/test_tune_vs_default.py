"""scripts/studies/tune_vs_default.py at a tiny budget: both arms on fresh seeds, the tuned arm with the tuned settings,
paired differences that match the per-seed numbers, strict JSON, and bad input in one line."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from clstm_ppo.config import load_config, to_dict
from clstm_ppo.run_files.run_state import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "scripts" / "studies" / "tune_vs_default.py")


def refuse(token: str) -> None:
    raise AssertionError(f"not strict JSON: {token}")


def test_both_arms_train_on_fresh_seeds_and_the_paired_statistics_hold(tmp_path):
    tuned = tmp_path / "study" / "best.yaml"  # what clstm-ppo-tune writes: every setting of the best trial
    tuned.parent.mkdir()
    settings = load_config("smoke", ["ppo.learning_rate=0.002", "train.total_steps=256"])
    tuned.write_text(yaml.safe_dump(to_dict(settings)))
    (tuned.parent / "summary.json").write_text(json.dumps(
        {"trials": 4, "best": {"trial": 2, "value": 0.91, "seed_values": [0.91]}}))
    done = subprocess.run([sys.executable, SCRIPT, "--tuned", str(tuned), "--default", "smoke", "--data", "synthetic",
                           "--seeds", "2", "--first-seed", "7", "--out", str(tmp_path / "runs"), "--json",
                           "--set", "train.num_envs=8", "--set", "train.eval_every=1"],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1], parse_constant=refuse)
    assert out["steps"] == 256 and out["seeds"] == [7, 8]  # the tuned config's budget; no seed a trial used
    records = out["per_seed"]
    assert sorted((r["arm"], r["seed"]) for r in records) == [("default", 7), ("default", 8), ("tuned", 7),
                                                               ("tuned", 8)]
    for arm, rate in (("default", load_config("smoke", []).ppo.learning_rate), ("tuned", 0.002)):
        saved = load_checkpoint(tmp_path / "runs" / "synthetic" / f"{arm}-seed7" / "latest.pt")
        assert saved.config["ppo"]["learning_rate"] == pytest.approx(rate) and saved.global_step >= 256
    by = {(r["arm"], r["seed"]): r for r in records}
    for key in ("val_composite", "test_sharpe", "test_total_return"):
        diffs = [by[("tuned", s)][key] - by[("default", s)][key] for s in (7, 8)]
        assert out["paired"][key]["mean_diff"] == pytest.approx(np.mean(diffs))
        low, high = out["paired"][key]["ci95"]
        assert low <= np.mean(diffs) <= high
    default_row, tuned_row = out["summary"]
    assert default_row["val_composite_std"] == pytest.approx(
        np.std([by[("default", s)]["val_composite"] for s in (7, 8)], ddof=1))
    spread = max(default_row["val_composite_std"], tuned_row["val_composite_std"])
    beats = tuned_row["val_composite"] - default_row["val_composite"] > spread
    assert out["verdict"].startswith("tuned beats") == beats
    assert "best of 4 trials" in done.stdout


@pytest.mark.parametrize("args, words", [(["--tuned", "nowhere.yaml"], "not found"),
                                         (["--tuned", "bad.yaml"], "error:"),
                                         (["--tuned", "bad.yaml", "--seeds", "0"], "at least 1")])
def test_bad_input_is_one_line(tmp_path, args, words):
    (tmp_path / "bad.yaml").write_text("ppo: {no_such_setting: 1}\n")
    done = subprocess.run([sys.executable, SCRIPT, *args, "--out", str(tmp_path / "runs")], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0 and words in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()
