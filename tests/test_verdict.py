"""The verdict over pooled walk-forward test days (docs/RESULTS.md, "The verdict"): run folders laid out as
reproduce_paper.py writes them, pooled with each test day once and a fold's seeds as one policy, tested against a
plain numpy computation, and every folder that cannot be pooled refused in one line."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from clstm_lab.studies.verdict import VerdictError, pooled_runs, verdict_rows
from clstm_ppo.backtest.sharpe_difference import sharpe_difference

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "studies" / "verdict.py"
BENCH = ("best_conditional_rule", "best_rule", "buy_and_hold", "putwrite")


def write_grid(folder: Path, years: list[int], seeds: int, edge: float = 0.0, seed: int = 0) -> dict:
    """Run folders of one configuration: fold k tests year ``years[k]``; returns what was written, by fold and seed."""
    rng = np.random.default_rng(seed)
    written = {}
    for k, year in enumerate(years):
        dates = pd.bdate_range(f"{year}-01-01", f"{year}-12-31")
        market = rng.normal(0.0004, 0.01, len(dates))
        bench = {b: market * (0.5 + 0.1 * i) + rng.normal(0, 0.002, len(dates)) for i, b in enumerate(BENCH)}
        tbill = np.full(len(dates), 0.0001)
        for s in range(seeds):
            agent = 0.6 * market + edge + rng.normal(0, 0.003, len(dates))
            frame = pd.DataFrame({"date": dates.strftime("%Y-%m-%d"), "agent_1": agent, "agent_2": agent * 0.5,
                                  **bench, "cash": tbill, "tbill": tbill})
            run = folder / f"fold{k}" / f"clstm-tw30-seed{s}"
            run.mkdir(parents=True)
            frame.to_csv(run / "test_returns.csv", index=False)
            written[(k, s)] = frame
    return written


def test_pooled_days_are_the_folds_end_to_end_each_day_once_and_a_folds_seeds_their_daily_mean(tmp_path):
    written = write_grid(tmp_path / "g", [2003, 2004, 2005], seeds=3)
    pooled = pooled_runs(tmp_path / "g")
    expected_agent = np.concatenate([np.mean([written[(k, s)]["agent_1"] for s in range(3)], axis=0)
                                     for k in range(3)])
    expected_rule = np.concatenate([written[(k, 0)]["best_rule"] for k in range(3)])
    assert pooled.folds == 3 and pooled.seeds == 3
    assert len(pooled.dates) == sum(len(written[(k, 0)]) for k in range(3)) and pooled.dates.is_unique
    np.testing.assert_allclose(pooled.returns["agent"], expected_agent, rtol=0, atol=1e-15)
    np.testing.assert_allclose(pooled.returns["best_rule"], expected_rule, rtol=0, atol=1e-15)


def test_the_rows_are_ledoit_wolfs_test_of_the_pooled_excess_returns(tmp_path):
    write_grid(tmp_path / "base", [2003, 2004], seeds=2, seed=1)
    write_grid(tmp_path / "better", [2003, 2004], seeds=2, edge=0.0004, seed=1)
    grids = {"base": pooled_runs(tmp_path / "base"), "better": pooled_runs(tmp_path / "better")}
    rows = verdict_rows(grids, resamples=199)
    assert [(r["a"], r["b"]) for r in rows] == [("base", b) for b in BENCH] + [("better", b) for b in BENCH] + \
        [("better", "base")]
    last = rows[-1]
    a = grids["better"].returns["agent"] - grids["better"].tbill
    b = grids["base"].returns["agent"] - grids["base"].tbill
    assert last["sharpe_a"] == pytest.approx(a.mean() / a.std() * np.sqrt(252))
    assert last["difference"] == pytest.approx(last["sharpe_a"] - last["sharpe_b"])
    assert last["difference"] > 0 and last["ci_low"] > 0  # the same noise, a daily edge of 4 bp: found
    reference = sharpe_difference(a, b, resamples=199)
    assert (last["ci_low"], last["ci_high"], last["p_value"]) == \
        pytest.approx((reference.ci_low, reference.ci_high, reference.p_value))
    equity = np.cumprod(1.0 + np.concatenate([[0.0], grids["better"].returns["agent"]]))
    assert last["total_return_a"] == pytest.approx(equity[-1] - 1)
    assert last["max_drawdown_a"] == pytest.approx(np.max(1 - equity / np.maximum.accumulate(equity)))
    worst = np.sort(grids["better"].returns["agent"])[: max(1, int(0.05 * len(a)))]
    assert last["daily_cvar5_a"] == pytest.approx(worst.mean(), rel=0.05)


def test_folds_that_overlap_seeds_that_disagree_and_missing_runs_are_refused(tmp_path):
    write_grid(tmp_path / "overlap", [2003, 2003], seeds=1)
    with pytest.raises(VerdictError, match="overlap"):
        pooled_runs(tmp_path / "overlap")
    written = write_grid(tmp_path / "odd", [2003], seeds=2)
    frame = written[(0, 1)].copy()
    frame["best_rule"] += 0.001
    frame.to_csv(tmp_path / "odd" / "fold0" / "clstm-tw30-seed1" / "test_returns.csv", index=False)
    with pytest.raises(VerdictError, match="walked different best_rule"):
        pooled_runs(tmp_path / "odd")
    (tmp_path / "empty" / "fold0").mkdir(parents=True)
    with pytest.raises(VerdictError, match="configurations none"):
        pooled_runs(tmp_path / "empty")
    with pytest.raises(VerdictError, match="no fold"):
        pooled_runs(tmp_path)
    write_grid(tmp_path / "other", [2005, 2006], seeds=1)
    write_grid(tmp_path / "later", [2005, 2007], seeds=1)
    with pytest.raises(VerdictError, match="tested on other days"):
        verdict_rows({"a": pooled_runs(tmp_path / "other"), "b": pooled_runs(tmp_path / "later")}, resamples=99)


def test_the_command_writes_its_rows_with_provenance_and_refuses_bad_input_in_one_line(tmp_path):
    write_grid(tmp_path / "g", [2003, 2004], seeds=1)
    rows = tmp_path / "rows"
    ok = subprocess.run([sys.executable, str(SCRIPT), f"scale={tmp_path / 'g'}", "--name", "t", "--rows", str(rows),
                         "--resamples", "99"], capture_output=True, text=True, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    kept = pd.read_csv(rows / "t.csv")
    assert list(kept["b"]) == list(BENCH) and {"commit", "machine", "date", "command"} <= set(kept.columns)
    shown = subprocess.run([sys.executable, str(SCRIPT), "--show", "t", "--rows", str(rows)], capture_output=True,
                           text=True, cwd=tmp_path)
    assert shown.returncode == 0 and "best_conditional_rule" in shown.stdout
    for bad, says in (([f"{tmp_path / 'g'}", "--name", "t"], "LABEL=FOLDER"),
                      ([f"x={tmp_path / 'nothing'}", "--name", "t"], "no fold"),
                      ([f"x={tmp_path / 'g'}"], "--name"),
                      (["--show", "absent", "--rows", str(rows)], "not found")):
        done = subprocess.run([sys.executable, str(SCRIPT), *bad], capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, bad
