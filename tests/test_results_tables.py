"""docs/RESULTS.md's tables made from the grids' rows (lab/clstm_lab/studies/results_tables.py), on a fixture grid: the
paired differences equal a plain computation, a block's body is made again and nothing else of the doc changes."""
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from clstm_lab.studies.results_tables import (
    against_benchmarks,
    lever_rows,
    load_grids,
    paired_grids,
    refreshed,
    render,
)
from clstm_ppo.backtest.statistics import bootstrap_ci, clustered_bootstrap_ci

DATA = Path(__file__).parent / "data"


@pytest.fixture
def grids(tmp_path):
    shutil.copy(DATA / "grid_small.csv", tmp_path / "small.csv")
    other = pd.read_csv(DATA / "grid_small.csv")
    other["sharpe_excess"] += np.where(other["config"] == "clstm", 0.25, 0.0)  # a lever that adds 0.25
    other.to_csv(tmp_path / "lever.csv", index=False)
    return load_grids(tmp_path)


def test_each_agent_against_each_benchmark_is_paired_by_seed_and_fold(grids):
    frame = pd.read_csv(DATA / "grid_small.csv").set_index(["config", "seed", "fold"])
    rows = {(r["pair"], r["metric"]): r for r in against_benchmarks(grids["small"])}
    assert {pair for pair, _ in rows} == {f"{c} - {b}" for c in ("clstm", "mlp")
                                          for b in ("buy_and_hold", "best_rule", "putwrite")}
    for config in ("clstm", "mlp"):
        for bench in ("buy_and_hold", "best_rule", "putwrite"):
            diffs = np.array([frame.loc[(config, s, f), "sharpe_excess"] - frame.loc[(bench, s, f), "sharpe_excess"]
                              for f in (0, 1) for s in range(3)])  # the grid's order: fold, then seed
            row = rows[(f"{config} - {bench}", "sharpe_excess")]
            assert row["pairs"] == 6 and row["mean"] == pytest.approx(diffs.mean())
            assert (row["ci_low"], row["ci_high"]) == pytest.approx(bootstrap_ci(diffs))
            # the fold-clustered interval: folds resampled, then seeds within them
            folds = np.repeat([0, 1], 3)
            assert (row["fold_ci_low"], row["fold_ci_high"]) == pytest.approx(clustered_bootstrap_ci(diffs, folds))
            assert row["folds"] == 2
            assert row["wins"] == pytest.approx((diffs > 0).mean())


def test_a_lever_is_its_grids_runs_less_the_grid_it_changed(grids):
    rows = {r["metric"]: r for r in paired_grids(grids, "small:clstm", "lever:clstm")}
    assert rows["sharpe_excess"]["mean"] == pytest.approx(0.25) and rows["sharpe_excess"]["pairs"] == 6
    assert rows["total_return"]["mean"] == 0.0


def test_a_levers_line_is_its_pair_with_the_base_and_its_own_runs_against_best_rule(grids):
    (row,) = lever_rows(grids, "small:clstm", ["lever:clstm"])
    pair = next(r for r in paired_grids(grids, "small:clstm", "lever:clstm") if r["metric"] == "sharpe_excess")
    assert (row["mean"], row["ci_low"], row["fold_ci_high"], row["pairs"]) == \
        (pair["mean"], pair["ci_low"], pair["fold_ci_high"], pair["pairs"])
    frame = pd.read_csv(DATA / "grid_small.csv").set_index(["config", "seed", "fold"])
    sharpe = frame["sharpe_excess"]
    diffs = np.array([sharpe[("clstm", s, f)] + 0.25 - sharpe[("best_rule", s, f)] for f in (0, 1) for s in range(3)])
    assert row["vs_best_rule"] == pytest.approx(diffs.mean())
    assert (row["rule_ci_low"], row["rule_ci_high"]) == pytest.approx(bootstrap_ci(diffs))


def test_a_doc_gets_its_tables_again_and_keeps_its_words(grids):
    doc = ("# Results\n\nWords stay.\n\n<!-- table against small -->\nstale\n<!-- end table -->\n\n"
           "More words.\n<!-- table pair small:clstm lever:clstm -->\n<!-- end table -->\n")
    new = refreshed(doc, grids)
    assert new.startswith("# Results\n\nWords stay.\n\n<!-- table against small -->\n```\n")
    assert "stale" not in new and "More words." in new and "lever:clstm - small:clstm" in new
    assert refreshed(new, grids) == new, "made once, current after"
    with pytest.raises(SystemExit, match="table 'sideways small': write 'against GRID', 'pair"):
        render("sideways small", grids)
    with pytest.raises(SystemExit, match="no grid 'gone'"):
        render("pair gone:clstm small:clstm", grids)
    with pytest.raises(SystemExit, match="no grid 'gone'"):
        render("levers small:clstm gone:clstm", grids)
    with pytest.raises(SystemExit, match="lever:ppo shares no .window, seed, fold. with small:clstm"):
        render("levers small:clstm lever:ppo", grids)


def test_a_verdict_table_shows_the_kept_tests_rows_and_an_unknown_one_says_how_to_make_it(tmp_path, grids):
    from clstm_lab.studies.results_tables import load_verdicts
    from clstm_lab.studies.verdict import SHOWN

    row = {column: 0.5 for column in SHOWN} | {"a": "scale", "b": "best_rule", "difference": 0.125, "commit": "abc"}
    pd.DataFrame([row, row | {"b": "putwrite", "difference": -0.25}]).to_csv(tmp_path / "v.csv", index=False)
    body = render("verdict v", grids, load_verdicts(tmp_path))
    assert body.startswith("```\n") and "scale" in body and "putwrite" in body and "-0.250" in body
    assert "commit" not in body
    with pytest.raises(SystemExit, match="no verdict 'w'.*--name w"):
        render("verdict w", grids, load_verdicts(tmp_path))
