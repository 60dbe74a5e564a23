"""The paper comparison: scripts/studies/reproduce_paper.py at a tiny budget, and model selection blind to the test
split."""
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
from clstm_ppo.run_files.run_state import load_checkpoint
from clstm_ppo.train import main as train_main

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("total_return", "annual_return", "sharpe_excess", "sharpe", "max_drawdown", "min_equity", "ruined",
           "profit_per_trade", "trades", "costs")


def test_the_script_reports_walk_forward_folds_with_paired_statistics_in_strict_json(tmp_path):
    script = ROOT / "scripts" / "studies" / "reproduce_paper.py"
    done = subprocess.run([sys.executable, str(script), "--config", "smoke",
                           "--data", "synthetic", "--steps", "256", "--seeds", "2", "--folds", "2",
                           "--kinds", "clstm", "--windows", "5", "10", "--out", str(tmp_path / "runs"),
                           "--grid-dir", str(tmp_path / "grids"), "--json", "--set", "train.num_envs=8",
                           "--set", "train.eval_every=1"],
                          capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1], parse_constant=refuse)  # strict JSON: no NaN
    folds = [f["fold"] for f in out["folds"]]
    assert [f["index"] for f in folds] == [0, 1] and folds[0]["test_end"] < folds[1]["test_end"]
    assert all(f["train_end"] < f["val_end"] < f["test_end"] for f in folds)
    main = {row["policy"]: row for row in out["main"]}
    # One kind keeps the grid at 12 cells (the pairing code is the same for any number of kinds)
    assert list(main)[:5] == ["clstm", "clstm+excess", "buy_and_hold", "macd_rule", "best_rule"]
    assert [row["policy"] for row in out["ablation"]] == ["clstm TW 5", "clstm TW 10"]  # smoke's TW is 10
    assert len(out["per_run"]) == 2 * 2 * (2 + 1)  # folds x seeds x (one kind x two rewards, then TW 5)
    for row in out["main"][:5] + out["ablation"]:
        assert row["runs"] == 4  # seeds x folds
        for key in METRICS:
            finite = row[key] is not None and math.isfinite(row[key]) and math.isfinite(row[f"{key}_std"])
            # profit per trade has no value only when no run of that row closed a trade
            assert finite or (key == "profit_per_trade" and row["trades"] == 0), (row["policy"], key)
        assert 0.0 <= row["ruined"] <= 1.0 and row["min_equity"] <= 1.0  # a share of runs; below the start
        low, high = row["sharpe_excess_ci"]
        assert low <= row["sharpe_excess"] <= high
    bh = [r for r in out["per_run"] if r["config"] == "clstm" and r["window"] == 10]
    assert {r["fold"] for r in bh} == {0, 1}
    pairs = {(row["pair"], row["metric"]): row for row in out["paired"]}
    assert {"clstm+excess - clstm", "clstm+excess - buy_and_hold"} <= {p for p, _ in pairs}
    runs = {(r["config"], r["seed"], r["fold"]): r for r in out["per_run"] if r["window"] == 10}
    diffs = [runs[("clstm+excess", s, f)]["sharpe_excess"] - runs[("clstm", s, f)]["sharpe_excess"] for s in (0, 1)
             for f in (0, 1)]
    assert pairs[("clstm+excess - clstm", "sharpe_excess")]["mean"] == pytest.approx(np.mean(diffs))
    assert pairs[("clstm+excess - clstm", "sharpe_excess")]["pairs"] == 4
    ablation = {(row["pair"], row["metric"]): row for row in out["ablation_paired"]}
    assert {p for p, _ in ablation} == {"clstm TW 5 - clstm TW 10", "clstm TW 5 - buy_and_hold",
                                        "clstm TW 10 - buy_and_hold"}
    tw = {(r["window"], r["seed"], r["fold"]): r["sharpe_excess"] for r in out["per_run"] if r["config"] == "clstm"}
    diffs = [tw[(5, s, f)] - tw[(10, s, f)] for s in (0, 1) for f in (0, 1)]
    assert ablation[("clstm TW 5 - clstm TW 10", "sharpe_excess")]["mean"] == pytest.approx(np.mean(diffs))
    bh_fold = {row["fold"]: row["buy_and_hold"] for row in out["per_fold"]}
    diffs = [tw[(5, s, f)] - bh_fold[f] for s in (0, 1) for f in (0, 1)]
    assert ablation[("clstm TW 5 - buy_and_hold", "sharpe_excess")]["mean"] == pytest.approx(np.mean(diffs))
    # Each agent against the best fixed rule of its fold (one deterministic walk a fold, as buy-and-hold)
    rule_fold = {row["fold"]: row["best_rule"] for row in out["per_fold"]}
    diffs = [runs[("clstm+excess", s, f)]["sharpe_excess"] - rule_fold[f] for s in (0, 1) for f in (0, 1)]
    assert pairs[("clstm+excess - best_rule", "sharpe_excess")]["mean"] == pytest.approx(np.mean(diffs))
    # Distinct walks per configuration and fold, against a recount from the runs' own metrics: identical walks
    # have identical returns and Sharpe, distinct ones (almost surely) do not.
    walks = {(row["config"], row["fold"]): row for row in out["walks"]}
    assert set(walks) == {(c, f) for c in ("clstm", "clstm+excess") for f in (0, 1)}
    for (config, fold), row in walks.items():
        mine = [r for r in out["per_run"] if r["config"] == config and r["fold"] == fold and r["window"] == 10]
        assert row["runs"] == len(mine) == 2 and 1 <= row["largest_group"] <= row["runs"]
        assert row["distinct_walks"] == len({(r["total_return"], r["sharpe_excess"]) for r in mine})
    dsr = out["deflated"]
    assert dsr["trials"] == 2 and 0.0 <= dsr["deflated_sharpe"] <= 1.0 and dsr["best"] in main
    # The grid's CSV (docs/data/grids/<grid>.csv): every run as the JSON has it, then each benchmark's walk of its
    # fold under each seed of the first configuration, every row saying which grid, commit, machine and command.
    from clstm_lab.studies.across_runs import GRID_META, read_grid
    rows = read_grid(tmp_path / "grids" / "synthetic.csv")
    runs = [r for r in rows if r["config"] not in ("buy_and_hold", "macd_rule", "best_rule", "putwrite",
                                                   "best_conditional_rule")]
    assert len(runs) == len(out["per_run"])
    for read, row in zip(runs, out["per_run"], strict=True):
        for key, value in row.items():
            if value is None:  # null in the JSON (no smoothed pick, no closed trade): an empty cell in the CSV
                assert read[key] is None or math.isnan(read[key]), (key, row)
                continue
            assert read[key] == (value if isinstance(value, str | int) else
                                 pytest.approx(value, rel=1e-9, nan_ok=True)), (key, row)
    for bench in ("buy_and_hold", "macd_rule", "best_rule", "putwrite", "best_conditional_rule"):
        mine = [r for r in rows if r["config"] == bench]
        assert sorted((r["seed"], r["fold"]) for r in mine) == [(s, f) for s in (0, 1) for f in (0, 1)]
        for fold in (0, 1):  # one walk a fold, the same under each seed
            values = {r["sharpe_excess"] for r in mine if r["fold"] == fold}
            expected = next(row[bench] for row in out["per_fold"] if row["fold"] == fold)
            assert len(values) == 1 and values.pop() == pytest.approx(expected)
    command = "python scripts/studies/reproduce_paper.py --config smoke"
    assert all(r["grid"] == "synthetic" and r["command"].startswith(command) for r in rows)
    assert all(r[key] for r in rows for key in GRID_META)


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
    assert chosen["a"].update == chosen["b"].update and chosen["a"].best == chosen["b"].best
    for key, tensor in chosen["a"].model.items():
        assert torch.equal(tensor, chosen["b"].model[key]), key


def refuse(constant: str):
    raise AssertionError(f"{constant} in the script's JSON: not JSON")


def write(frame, path: Path) -> str:
    frame.to_csv(path, index=False)
    return str(path)


def test_the_grid_pairs_every_two_kinds_run_by_run():
    """gather's kind-against-kind pairs (the script's test above trains one kind): the mean of the per-run
    differences over seeds and folds, from made-up results whose differences are known."""
    from clstm_lab.studies.across_runs import METRICS
    from clstm_lab.studies.paper_grid import BENCHMARKS, gather

    rng = np.random.default_rng(0)
    cells, results = [], []
    for fold in (0, 1):
        for kind in ("clstm", "mlp"):
            for seed in (0, 1, 2):
                metrics = {key: float(rng.normal()) for key in METRICS} | {"ruined": 0.0}
                cells.append({"kind": kind, "reward": "equity", "window": 10, "seed": seed, "fold": fold})
                results.append({"agent": metrics, "smoothed": None, "agent_returns": rng.normal(0, 0.01, 20).tolist(),
                                **{b: dict(metrics) for b in BENCHMARKS}})
    tables = gather(cells, results, ["clstm", "mlp"], ["equity"], 10, [0, 1], 252.0)
    value = {(c["kind"], c["seed"], c["fold"]): r["agent"]["sharpe_excess"]
             for c, r in zip(cells, results, strict=True)}
    diffs = [value[("clstm", s, f)] - value[("mlp", s, f)] for s in (0, 1, 2) for f in (0, 1)]
    pair = next(row for row in tables["paired"] if row["pair"] == "clstm - mlp" and row["metric"] == "sharpe_excess")
    assert pair["pairs"] == 6 and pair["mean"] == pytest.approx(np.mean(diffs))
    assert pair["ci_low"] <= pair["mean"] <= pair["ci_high"]
    assert [row["policy"] for row in tables["main"]][:2] == ["clstm", "mlp"]
    assert tables["deflated"]["trials"] == 2


def test_a_setting_that_names_the_fold_reads_each_cell_s_own():
    from clstm_lab.studies.paper_grid import cell_overrides

    sets = ["data.augment_checkpoint=gens/fold{fold}/wgan_gp.pt", "train.num_envs=8"]
    cell = {"kind": "clstm", "reward": "equity", "window": 30, "seed": 4, "fold": 2}
    assert cell_overrides(sets, cell) == ["data.augment_checkpoint=gens/fold2/wgan_gp.pt", "train.num_envs=8"]
    assert cell_overrides(sets, {**cell, "fold": None})[0] == "data.augment_checkpoint=gens/foldsplit/wgan_gp.pt"
    assert sets[0].endswith("fold{fold}/wgan_gp.pt")  # the grid's own list is left as given


def test_a_cell_stopped_before_its_budget_is_not_walked_and_resumes_on_the_next_launch(tmp_path, monkeypatch):
    """SIGTERM makes the trainer return normally at an update boundary: a grid must not record that shorter run."""
    from clstm_lab.studies import seeded_runs
    from clstm_ppo.run_files.run_state import RunState, save_checkpoint

    launches = []

    def trainer(stop_at: int):
        def fake_train_run(config, sets, settings, resume_from, fresh_start, num_gpus):  # noqa: ARG001
            launches.append(resume_from)
            run = Path(settings["output.checkpoint_dir"]) / settings["output.run_name"]
            run.mkdir(parents=True, exist_ok=True)
            state = RunState(model={}, optimizer={"state": {}, "param_groups": []}, scaler=None, update=1,
                             global_step=stop_at, episodes=0, config={},
                             normalizer={"names": [], "mean": [], "std": []}, world_size=1, num_envs=1)
            for name in ("latest.pt", "best_composite.pt"):
                save_checkpoint(state, run / name)
        return fake_train_run

    monkeypatch.setattr(seeded_runs, "train_run", trainer(stop_at=600))
    with pytest.raises(SystemExit, match="stopped before its budget of 1,000 env steps; run the same command again"):
        seeded_runs.train_to_budget(None, "sp500", 0, 1000, tmp_path, "clstm-seed0", [])
    monkeypatch.setattr(seeded_runs, "train_run", trainer(stop_at=1000))
    seeded_runs.train_to_budget(None, "sp500", 0, 1000, tmp_path, "clstm-seed0", [])
    seeded_runs.train_to_budget(None, "sp500", 0, 1000, tmp_path, "clstm-seed0", [])  # finished: not launched
    assert launches == [None, "latest"]
