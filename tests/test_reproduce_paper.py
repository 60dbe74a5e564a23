"""The paper comparison: scripts/reproduce_paper.py at a tiny budget, and model selection blind to the test split."""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_bars

from clstm_ppo.cli import run_cli
from clstm_ppo.config import load_config
from clstm_ppo.data import build_market_data
from clstm_ppo.train import main as train_main
from clstm_ppo.training.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("total_return", "annual_return", "sharpe", "max_drawdown", "profit_per_trade", "trades")


def test_the_script_reports_every_variant_the_benchmarks_and_the_ablation(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\n<!-- begin other -->\nkept\n<!-- end other -->\n")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce_paper.py"), "--config", "smoke",
                           "--data", "synthetic", "--steps", "256", "--seeds", "2", "--windows", "5", "10",
                           "--out", str(tmp_path / "runs"), "--results", str(results), "--json",
                           "--set", "train.num_envs=8", "--set", "train.eval_every=1"],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1], parse_constant=refuse)  # strict JSON: no NaN
    main = {row["policy"]: row for row in out["main"]}
    assert list(main) == ["clstm", "lstm", "mlp", "buy_and_hold", "macd_rule"]
    assert [row["policy"] for row in out["ablation"]] == ["clstm TW 5", "clstm TW 10"]  # smoke's TW is 10
    assert len(out["per_seed"]) == 2 * (3 + 1)  # three kinds at TW 10, then TW 5 for clstm; two seeds each
    for row in out["main"] + out["ablation"]:
        assert row["seeds"] == 2
        for key in METRICS:
            finite = row[key] is not None and math.isfinite(row[key]) and math.isfinite(row[f"{key}_std"])
            # profit per trade has no value only when no run of that row closed a trade
            assert finite or (key == "profit_per_trade" and row["trades"] == 0), (row["policy"], key)
    assert main["buy_and_hold"]["sharpe_std"] == 0.0  # the same bars for every seed: one deterministic walk
    low, high = main["clstm"]["sharpe_ci"]
    assert low <= main["clstm"]["sharpe"] <= high
    pairs = {(row["pair"], row["metric"]): row for row in out["paired"]}
    assert {p for p, _ in pairs} == {"clstm - lstm", "clstm - mlp", "lstm - mlp", "clstm - buy_and_hold",
                                     "lstm - buy_and_hold", "mlp - buy_and_hold"}
    per_seed = {(r["kind"], r["seed"]): r for r in out["per_seed"] if r["window"] == 10}
    clstm_minus_lstm = np.mean([per_seed[("clstm", s)]["sharpe"] - per_seed[("lstm", s)]["sharpe"] for s in (0, 1)])
    assert pairs[("clstm - lstm", "sharpe")]["mean"] == pytest.approx(clstm_minus_lstm)
    text = results.read_text()
    assert "kept" in text and "<!-- begin synthetic -->" in text and "### Window ablation (clstm)" in text
    assert "### Paired differences over seeds" in text
    assert "reproduce_paper.py --config smoke" in text


def test_altering_test_bars_leaves_the_selected_checkpoint_unchanged(tmp_path):
    """Model selection walks the validation split only: a different future must not change what is chosen."""
    bars = make_bars(700, seed=3)
    data = build_market_data(load_config("smoke", [f"data.source={write(bars, tmp_path / 'a.csv')}"]).data)
    future = (bars["Date"] >= str(data.dates[data.splits["test"][0]].date())).to_numpy()  # the test split's bars
    assert 50 < future.sum() < len(bars) / 2
    changed = bars.copy()
    rng = np.random.default_rng(0)
    shock = np.exp(np.cumsum(rng.normal(0.002, 0.03, future.sum())))  # another future entirely
    for column in ("Open", "High", "Low", "Close"):
        changed.loc[future, column] = bars.loc[future, column].to_numpy() * shock
    changed.loc[future, "Volume"] = rng.integers(10_000, 9_000_000, future.sum())
    write(changed, tmp_path / "b.csv")
    chosen = {}
    for name in ("a", "b"):
        code = run_cli(train_main, ["--config", "smoke", "--data", str(tmp_path / f"{name}.csv"), "--checkpoint-dir",
                                    str(tmp_path / name), "--run-name", "run", "--total-steps", "2048",
                                    "--eval-every", "1", "--set", "train.num_envs=8"])
        assert code == 0
        chosen[name] = load_checkpoint(tmp_path / name / "run" / "best_composite.pt")
    assert chosen["a"]["update"] == chosen["b"]["update"] and chosen["a"]["best"] == chosen["b"]["best"]
    for key, tensor in chosen["a"]["model"].items():
        assert torch.equal(tensor, chosen["b"]["model"][key]), key


def refuse(constant: str):
    raise AssertionError(f"{constant} in the script's JSON: not JSON")


def write(frame, path: Path) -> str:
    frame.to_csv(path, index=False)
    return str(path)
