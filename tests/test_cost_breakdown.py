"""clstm_lab.studies.cost_breakdown (scripts/studies/cost_breakdown.py): a grid's trading costs against its losses,
from each run's test walk."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import strict_loads

from clstm_lab.studies.cost_breakdown import GridInputError, cost_breakdown
from clstm_ppo.tables import strict_json

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "studies" / "cost_breakdown.py"
CASH = 250_000.0
SYMBOLS = ("AAA", "BBB")


def account(rng: np.random.Generator) -> dict:
    """One account's walk as evaluate's JSON holds it: half of them ruined, some by costs, some without trades."""
    costs, trades = float(rng.uniform(0, 3 * CASH)), int(rng.integers(0, 4)) * 100
    ruined = bool(rng.random() < 0.5)
    return {"costs": costs, "cost_commission": float(costs * rng.uniform(0, 1)), "trades": trades,
            "total_return": float(rng.uniform(-1.0, -0.5) if ruined else rng.uniform(-0.4, 2.0)), "ruined": ruined,
            "max_drawdown_trough": f"201{rng.integers(6, 9)}-0{rng.integers(1, 10)}-15", "sharpe": 0.1}


def make_grid(root: Path, seed: int = 0) -> tuple[Path, Path, list[dict]]:
    """A grid's JSON log and run folders: 2 configurations x 2 folds x 3 seeds, each run walked with both picks
    over two underlyings; returns (log, runs folder, every account of the best pick with its run's keys)."""
    rng = np.random.default_rng(seed)
    runs, truth = root / "runs" / "dow", []
    per_run = [{"config": c, "window": 30, "seed": s, "fold": f, "sharpe_excess": 0.0}
               for c in ("clstm", "mlp+excess") for f in (0, 1) for s in range(3)]
    for r in per_run:
        folder = runs / f"fold{r['fold']}" / f"{r['config']}-tw30-seed{r['seed']}"
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text(yaml.safe_dump({"env": {"initial_cash": CASH}}))
        best = {s: account(rng) for s in SYMBOLS}
        smoothed = {s: account(rng) for s in SYMBOLS}
        report = {"checkpoints": [str(folder / "best_composite.pt"), str(folder / "best_composite_smoothed.pt")],
                  "policies": {"agent_1": best, "agent_2": smoothed, "buy_and_hold": best}}
        (folder / "test_report.json").write_text(json.dumps(report))
        truth += [{**m, **r} for m in best.values()]
    log = root / "grid.log"
    log.write_text("== grid: a table\n\n" + json.dumps({"per_run": per_run}) + "\n")
    return log, runs, truth


def breakdown_json(grid: Path, runs: Path, **options) -> dict:
    """What the command's --json prints: the rows and the table's settings, read back as strict JSON."""
    rows, extra = cost_breakdown(grid, runs, **options)
    assert extra.pop("accounts") == sum(r["accounts"] for r in rows)
    return strict_loads(strict_json({"rows": rows, **extra}))


def test_each_fold_matches_a_numpy_recount_of_the_walks(tmp_path):
    log, runs, truth = make_grid(tmp_path)
    out = breakdown_json(log, runs, before="2017-06-01")
    assert (out["pick"], out["by"], out["before"]) == ("best", "fold", "2017-06-01")
    assert [r["fold"] for r in out["rows"]] == [0, 1]
    for row in out["rows"]:
        acc = [a for a in truth if a["fold"] == row["fold"]]
        ruined = [a for a in acc if a["ruined"]]
        assert (row["runs"], row["accounts"]) == (6, 12)
        assert row["costs_x_cash"] == pytest.approx(np.median([a["costs"] / CASH for a in acc]))
        assert row["commission_share"] == pytest.approx(np.median([a["cost_commission"] / a["costs"] for a in acc]))
        traded = [a["cost_commission"] / a["trades"] for a in acc if a["trades"]]
        assert row["commission_per_trade"] == (pytest.approx(np.median(traded)) if traded else None)
        assert row["ruined"] == len(ruined)
        assert row["costs_over_loss"] == sum(a["costs"] > -a["total_return"] * CASH for a in ruined)
        assert row["bottomed_before"] == sum(a["max_drawdown_trough"] < "2017-06-01" for a in ruined)


def test_by_configuration_and_the_smoothed_pick_read_their_own_columns(tmp_path):
    log, runs, truth = make_grid(tmp_path, seed=1)
    best = breakdown_json(log, runs, by="config")
    assert [r["config"] for r in best["rows"]] == ["clstm", "mlp+excess"] and "before" not in best
    for row in best["rows"]:
        assert row["ruined"] == sum(a["ruined"] for a in truth if a["config"] == row["config"])
    smoothed = breakdown_json(log, runs, pick="smoothed")
    report = json.loads((runs / "fold0" / "clstm-tw30-seed0" / "test_report.json").read_text())
    assert report["policies"]["agent_2"] != report["policies"]["agent_1"]
    want = []
    for folder in sorted((runs / "fold0").iterdir()):
        want += [m["costs"] / CASH for m in json.loads((folder / "test_report.json").read_text())["policies"]
                 ["agent_2"].values()]
    assert smoothed["rows"][0]["costs_x_cash"] == pytest.approx(np.median(want))


def test_bad_input_gets_one_line_that_says_what_to_do(tmp_path):
    log, runs, _ = make_grid(tmp_path)
    cases = [((log, tmp_path / "nowhere"), {}, "is not a folder"),
             ((log, runs), {"before": "Feb 2018"}, "is not a date: write it as YYYY-MM-DD"),
             ((log, runs.parent), {}, "--runs takes the folder reproduce_paper.py trained")]
    for args, options, message in cases:
        with pytest.raises(GridInputError, match=message):
            cost_breakdown(*args, **options)
    with pytest.raises(SystemExit, match=r"not found: give a grid's CSV \(docs/data/grids/\) or the file "
                                         r"reproduce_paper.py --json"):  # read_grid's own
        cost_breakdown(tmp_path / "none.log", runs)
    report = runs / "fold1" / "mlp+excess-tw30-seed2" / "test_report.json"
    old = json.loads(report.read_text())
    for policy in old["policies"].values():
        for m in policy.values():
            del m["costs"]  # a walk from before costs were reported
    report.write_text(json.dumps(old))
    with pytest.raises(GridInputError, match="has no costs .*walk the grid again"):
        cost_breakdown(log, runs)
    old["checkpoints"] = old["checkpoints"][:1]
    old["policies"] = {"agent": old["policies"]["agent_1"]}
    report.write_text(json.dumps(old))
    with pytest.raises(GridInputError, match="walked no best_composite_smoothed.pt: choose --pick best"):
        cost_breakdown(log, runs, pick="smoothed")


def test_the_command_prints_the_table_and_json_and_refuses_bad_input_in_one_line(tmp_path):
    """The command as a user runs it: its last line is the library's answer, a bad date one line and exit 2."""
    log, runs, _ = make_grid(tmp_path)

    def run(*args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(SCRIPT), str(log), "--runs", str(runs), *args],
                              capture_output=True, text=True, timeout=120)

    done = run("--by", "config", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("24 accounts, best pick")
    assert strict_loads(done.stdout.strip().splitlines()[-1]) == breakdown_json(log, runs, by="config")
    bad = run("--before", "Feb 2018")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: --before 'Feb 2018' is not a date: write it as YYYY-MM-DD"
