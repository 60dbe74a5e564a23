"""scripts/studies/compare_grids.py: two paper-comparison grids paired run by run (configuration, window, seed,
fold), from what reproduce_paper.py printed or the CSV it wrote."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import strict_loads

from clstm_ppo.backtest.statistics import bootstrap_ci

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "studies" / "compare_grids.py"
DATA = Path(__file__).parent / "data"


def grid_runs(shift: float, seed: int, seeds: int = 4) -> list[dict]:
    """reproduce_paper's per_run rows: 2 configurations x 2 folds x ``seeds`` seeds of made-up metrics."""
    rng = np.random.default_rng(seed)
    return [{"config": config, "window": 30, "seed": s, "fold": fold, "sharpe_excess": float(rng.normal()) + shift,
             "total_return": float(rng.normal(0.1, 0.2)), "max_drawdown": float(rng.uniform(0.1, 0.5)),
             "trades": 10.0} for config in ("clstm", "mlp") for fold in (0, 1) for s in range(seeds)]


def write(path: Path, runs: list[dict]) -> Path:
    """As reproduce_paper.py --json leaves its log: tables first, the JSON last."""
    path.write_text("== clstm, TW 30, seed 0, fold 0\nsome table\n\n" + json.dumps({"per_run": runs}) + "\n")
    return path


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_runs_are_paired_by_configuration_window_seed_and_fold(tmp_path):
    a, b = grid_runs(0.0, 1), grid_runs(0.5, 2, seeds=5)  # b has a seed a lacks, and lists its runs in another order
    b = b[::-1]
    b[0]["sharpe_excess"] = None  # a number that does not exist leaves its pair out
    done = run(write(tmp_path / "a.log", a), write(tmp_path / "b.log", b), "--names", "50k", "500k", "--json")
    assert done.returncode == 0, done.stderr
    out = strict_loads(done.stdout.splitlines()[-1])
    assert (out["only_a"], out["only_b"]) == (0, 4)
    assert "500k - 50k" in done.stdout
    twin = {(r["config"], r["window"], r["seed"], r["fold"]): r for r in b}
    for config in ("clstm", "mlp"):
        for metric in ("sharpe_excess", "total_return", "max_drawdown"):
            row = next(r for r in out["rows"] if r["config"] == config and r["metric"] == metric)
            pairs = [(r[metric], twin[(r["config"], 30, r["seed"], r["fold"])][metric]) for r in a
                     if r["config"] == config]
            diffs = np.array([y - x for x, y in pairs if y is not None])
            assert row["runs"] == 8
            assert row["b_minus_a"] == pytest.approx(diffs.mean(), abs=1e-12)
            assert row["b_higher"] == pytest.approx((diffs > 0).mean())
            assert (row["ci_low"], row["ci_high"]) == pytest.approx(bootstrap_ci(diffs))
            assert row["a_mean"] == pytest.approx(np.mean([x for x, _ in pairs]))
    # --by config fold: the same pairs, each configuration's folds apart (2 folds x 4 shared seeds a row)
    by_fold = strict_loads(run(tmp_path / "a.log", tmp_path / "b.log", "--by", "config", "fold", "--json").stdout
                           .splitlines()[-1])["rows"]
    for config in ("clstm", "mlp"):
        for fold in (0, 1):
            row = next(r for r in by_fold if (r["config"], r["fold"], r["metric"]) == (config, fold, "total_return"))
            diffs = [twin[(r["config"], 30, r["seed"], fold)]["total_return"] - r["total_return"] for r in a
                     if (r["config"], r["fold"]) == (config, fold)]
            assert row["runs"] == 4 and row["b_minus_a"] == pytest.approx(np.mean(diffs), abs=1e-12)


def test_a_known_shift_is_found_and_a_grid_against_itself_differs_by_nothing(tmp_path):
    a = grid_runs(0.0, 1)
    b = [dict(r, sharpe_excess=r["sharpe_excess"] + 0.25) for r in a]
    out = strict_loads(run(write(tmp_path / "a.log", a), write(tmp_path / "b.log", b), "--json").stdout
                       .splitlines()[-1])
    sharpe = [r for r in out["rows"] if r["metric"] == "sharpe_excess"]
    assert all(r["b_minus_a"] == pytest.approx(0.25) and r["b_higher"] == 1.0 for r in sharpe)
    same = strict_loads(run(tmp_path / "a.log", tmp_path / "a.log", "--json").stdout.splitlines()[-1])
    assert all(r["b_minus_a"] == 0.0 and r["ci_low"] == r["ci_high"] == 0.0 for r in same["rows"])


def test_configurations_of_two_labels_pair_when_named(tmp_path):
    """--configs clstm clstm+dsr: the same agent under another reward in the other grid, paired run by run."""
    a = grid_runs(0.0, 1)
    b = [dict(r, config="clstm+dsr" if r["config"] == "clstm" else "other", sharpe_excess=r["sharpe_excess"] - 0.5)
         for r in a]
    out = strict_loads(run(write(tmp_path / "a.log", a), write(tmp_path / "b.log", b), "--configs", "clstm",
                           "clstm+dsr", "--json").stdout.splitlines()[-1])
    row = next(r for r in out["rows"] if r["metric"] == "sharpe_excess")
    assert row["config"] == "clstm" and row["runs"] == 8 and row["b_minus_a"] == pytest.approx(-0.5)
    assert {r["config"] for r in out["rows"]} == {"clstm"} and (out["only_a"], out["only_b"]) == (0, 0)


def test_a_grid_csv_is_read_with_its_numbers_and_pairs_with_a_later_grid(tmp_path):
    """A grid's rows kept as data (docs/data/grids/<grid>.csv; here a fixture in that format) when its logs and
    folders are gone: read back as numbers, and a later grid pairs with it run by run."""
    grid = DATA / "grid_small.csv"
    done = run(grid, grid, "--json")
    assert done.returncode == 0, done.stderr
    out = strict_loads(done.stdout.splitlines()[-1])
    sharpe = {r["config"]: r for r in out["rows"] if r["metric"] == "sharpe_excess"}
    assert set(sharpe) == {"clstm", "mlp", "buy_and_hold", "best_rule", "putwrite"}
    assert all(r["runs"] == 6 and r["b_minus_a"] == 0.0 for r in sharpe.values())  # 3 seeds x 2 folds
    frame = pd.read_csv(grid)
    value = float(frame.query("config == 'clstm' and seed == 0 and fold == 0")["sharpe_excess"].iloc[0])
    later = [{"config": "clstm", "window": 30, "seed": 0, "fold": 0, "sharpe_excess": value + 1.0,
              "total_return": 1.0, "max_drawdown": 0.1, "ruined": 0.0}]
    paired = strict_loads(run(grid, write(tmp_path / "later.log", later), "--json").stdout.splitlines()[-1])
    row = next(r for r in paired["rows"] if r["metric"] == "sharpe_excess")
    assert (row["runs"], row["b_minus_a"], paired["only_a"]) == (1, pytest.approx(1.0), 29)
    (tmp_path / "bad.csv").write_text("policy,value\nclstm,1\n")
    for bad, message in ((tmp_path / "bad.csv", "lacks the column(s) config, window, seed, fold"),
                         (tmp_path / "missing.csv", "missing.csv not found: give a grid's CSV")):
        done = run(bad, grid)
        assert done.returncode != 0 and done.stderr.strip().count("\n") == 0 and message in done.stderr, done.stderr


def write_run_folders(root: Path, runs: list[dict], rng: np.random.Generator) -> dict:
    """Each run's metrics.jsonl as the trainer writes it: training episodes every 100 steps to 1,000, 3 walks; and
    what --runs should read from it, computed here from the records."""
    want = {}
    for r in runs:
        folder = root / f"fold{r['fold']}" / f"{r['config']}-tw{r['window']}-seed{r['seed']}"
        folder.mkdir(parents=True)
        train = [{"kind": "train_episodes", "step": step, "episodes": float(rng.integers(1, 5)),
                  "return_pct": float(rng.normal(0, 10))} for step in range(100, 1001, 100)]
        evals = [{"kind": "eval", "step": step, "sharpe": float(rng.normal())} for step in (300, 600, 900)]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in [*train, *evals]))
        last = [x for x in train if x["step"] >= 900]  # the last tenth of 1,000 steps
        want[(r["config"], r["seed"], r["fold"])] = (
            np.average([x["return_pct"] for x in last], weights=[x["episodes"] for x in last]), evals[-1]["sharpe"])
    return want


def test_runs_folders_add_what_each_run_learnt_on_its_training_and_validation_years(tmp_path):
    a, b = grid_runs(0.0, 1, seeds=2), grid_runs(0.0, 2, seeds=2)
    rng = np.random.default_rng(3)
    want_a, want_b = (write_run_folders(tmp_path / name, runs, rng) for name, runs in (("a", a), ("b", b)))
    done = run(write(tmp_path / "a.log", a), write(tmp_path / "b.log", b), "--runs", tmp_path / "a", tmp_path / "b",
               "--json")
    assert done.returncode == 0, done.stderr
    rows = strict_loads(done.stdout.splitlines()[-1])["rows"]
    for metric, column in (("train_return_end", 0), ("val_sharpe_last", 1)):
        for config in ("clstm", "mlp"):
            row = next(r for r in rows if r["config"] == config and r["metric"] == metric)
            keys = [k for k in want_a if k[0] == config]
            assert row["a_mean"] == pytest.approx(np.mean([want_a[k][column] for k in keys]))
            assert row["b_minus_a"] == pytest.approx(np.mean([want_b[k][column] - want_a[k][column] for k in keys]))
    missing = run(tmp_path / "a.log", tmp_path / "b.log", "--runs", tmp_path / "a", tmp_path / "nowhere")
    assert missing.returncode != 0 and missing.stderr.strip().count("\n") == 0
    assert "--runs takes the folder reproduce_paper.py wrote this grid's runs to" in missing.stderr


@pytest.mark.parametrize(("content", "message"), [
    (None, "not found: give a grid's CSV (docs/data/grids/) or the file reproduce_paper.py --json printed to"),
    ("a log that never printed its JSON\n", "is not reproduce_paper.py's --json output"),
    ('{"data": "sp500"}\n', "is not reproduce_paper.py's --json output"),
    (json.dumps({"per_run": [dict(grid_runs(0.0, 1)[0], fold=7)]}),  # a fold the other grid does not have
     "the two grids share no run"),
])
def test_bad_input_is_one_line(tmp_path, content, message):
    good = write(tmp_path / "good.log", grid_runs(0.0, 1))
    bad = tmp_path / "bad.log"
    if content is not None:
        bad.write_text(content)
    done = run(good, bad)
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and message in done.stderr, done.stderr
