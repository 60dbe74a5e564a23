"""The learning certificate's study on the planted-edge market (docs/PLANTED.md): the
share of the oracle's edge a run captures, and the study command's refusals."""
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from clstm_lab.studies.learning_certificate import capture


def test_capture_is_the_share_of_the_oracles_edge():
    assert capture(1.0, 0.5, 1.5) == pytest.approx(0.5)
    assert capture(0.5, 0.5, 1.5) == 0.0 and capture(1.5, 0.5, 1.5) == 1.0
    assert math.isnan(capture(1.0, 0.5, 0.5))  # no edge to share


def script_main(name: str):
    """``main`` of scripts/studies/<name>.py (scripts are run, not imported as a package)."""
    path = Path(__file__).parents[1] / "scripts" / "studies" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def study_main():
    return script_main("learning_certificate")


@pytest.mark.parametrize("argv, words", [(["--strengths", "-1"], "--strengths must be >= 0"),
                                         (["--budgets", "0"], "--budgets > 0"),
                                         (["--set", "train.no_such=1", "--variant", "x"], "no_such"),
                                         (["--set", "ppo.ent_coef=0.1"], "--set needs --variant"),
                                         (["--set", "ppo.ent_coef=0.1", "--variant", "a/b"], "--set needs")])
def test_the_study_refuses_bad_input_in_one_line_before_training(argv, words, tmp_path, capsys):
    rows = tmp_path / "rows.csv"
    try:
        code = study_main()([*argv, "--out", str(tmp_path / "runs"), "--rows", str(rows)])
    except SystemExit as stop:  # argparse's own errors
        code = stop.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and words in err[-1]
    assert not rows.exists() and not (tmp_path / "runs").exists()


def test_sell_timing_is_one_for_the_oracles_choices_and_zero_for_a_policy_blind_to_the_state():
    from clstm_lab.studies.learning_certificate import sell_timing
    from clstm_ppo.backtest.oracle import true_premium
    from clstm_ppo.config import load_config
    from clstm_ppo.market.observed import observed_market_data
    cfg = load_config("planted", ["data.planted.years=4", "data.planted.train_years=1", "data.planted.val_years=1",
                                  "data.planted.premium_mean=0"])
    data = observed_market_data(cfg)
    rows = np.arange(len(data.dates))
    rich = true_premium(data, cfg)[0] > 0
    assert 0.02 < rich.mean() < 0.98  # both kinds of bar are there
    assert sell_timing(rows, rich.astype(float), data, cfg)["sell_timing"] == 1.0
    blind = sell_timing(rows, np.full(len(rows), 0.3), data, cfg)
    assert blind["sell_timing"] == pytest.approx(0.0) and blind["p_sell_rich"] == pytest.approx(0.3)
    masked = np.where(rich, np.nan, 0.2)  # no sale allowed on the rich bars: nothing known there
    assert math.isnan(sell_timing(rows, masked, data, cfg)["p_sell_rich"])


def one_account(returns: np.ndarray, dates):
    """A one-underlying walk compounding ``returns`` (one per bar after the first) from $10,000, the T-bill at 2%."""
    from clstm_ppo.backtest.result import WalkResult
    from clstm_ppo.data.calendar import detect_clock
    from clstm_ppo.market import COST_KINDS

    equity = 10_000.0 * np.concatenate([[1.0], np.cumprod(1 + returns)])[None]
    return WalkResult(policy="p", symbols=["PLT"], dates=dates, equity=equity, rate=np.full_like(equity, 0.02),
                      closed=np.zeros(1, int), wins=np.zeros(1, int), open_at_end=np.zeros(1, int),
                      traded=np.zeros(1), costs=np.zeros((1, len(COST_KINDS))), ruin_fraction=0.5,
                      clock=detect_clock(dates))


def test_a_seed_beats_best_rule_by_more_than_luck_only_where_the_interval_says_so():
    """The per-seed test is Ledoit and Wolf's on the two walks' daily returns over the T-bill: its difference is the
    report's Sharpe over the T-bill less the rule's; a walk against itself holds 0; a clearly better one excludes it."""
    import pandas as pd

    from clstm_lab.studies.learning_certificate import against_best_rule
    from clstm_ppo.backtest.report import underlying_metrics

    dates = pd.bdate_range("2016-01-04", periods=2521)  # ten years of weekdays
    rng = np.random.default_rng(0)
    rule = one_account(rng.normal(0.0003, 0.01, 2520), dates)
    same = against_best_rule(rule, rule)
    assert same["vs_best_rule_difference"] == pytest.approx(0.0, abs=1e-12)
    assert same["vs_best_rule_ci_low"] <= 0.0 <= same["vs_best_rule_ci_high"] and same["vs_best_rule_p"] > 0.5
    better = one_account(np.diff(rule.equity[0]) / rule.equity[0, :-1] + rng.normal(0.0006, 0.002, 2520), dates)
    test = against_best_rule(better, rule)
    report = underlying_metrics(better, 0)["sharpe_excess"] - underlying_metrics(rule, 0)["sharpe_excess"]
    assert test["vs_best_rule_difference"] == pytest.approx(report, rel=1e-3)  # ddof 0 against the report's 1
    assert test["vs_best_rule_ci_low"] > 0.0 and test["vs_best_rule_p"] < 0.01


def test_the_table_summarises_each_settings_seeds():
    from clstm_lab.studies.certificate_table import certificate_table

    def row(seed, variant, capture, timing, agent):
        return {"strength": "1.0", "market_seed": "0", "arm": "scratch", "variant": variant, "steps": "200000",
                "seed": str(seed), "premium_swing": "0.8", "sets": "agent.actions=scale" if variant else "",
                "capture": str(capture), "sell_timing": str(timing), "greedy_sell_timing": "", "walks_a_rule": "False",
                "agent_test_sharpe": str(agent), "oracle_test_sharpe": "0.72"}
    table = certificate_table([row(0, "", 0.4, 0.0, 0.3), row(1, "", 0.6, 0.1, 0.5), row(0, "scale", 0.7, 0.3, 0.6)])
    lines = table.splitlines()
    assert len(lines) == 4  # the header, its rule and one line per setting
    assert "| scratch | —: — | 200,000 | 2 | 0.40 (0.30..0.50) | 0.72 | 1 of 2 | 0.05 (0.00..0.10) | — | 0 of 2 |" \
        in lines[2]
    assert "scale: agent.actions=scale" in lines[3] and "| 1 of 1 |" in lines[3]
    kept = row(0, "curve", 0.7, 0.3, 0.6) | {"sets": "agent.actions=scale output.checkpoint_every=61"}
    assert "| curve: agent.actions=scale |" in certificate_table([kept])  # where checkpoints go is no setting shown
    assert lines[2].endswith("| 0 of 2 | — |")  # rows measured before the per-seed test say nothing of it
    tested = [row(s, "t", 0.7, 0.3, 0.6) | {"vs_best_rule_ci_low": low} for s, low in enumerate(("0.1", "-0.2", ""))]
    assert certificate_table(tested).splitlines()[2].endswith("| 1 of 2 |")  # interval above 0 in one of two


def curve_main():
    return script_main("learning_curve")


SMALL_PLANTED = ["data.planted.years=8", "data.planted.train_years=3", "data.planted.val_years=1",
                 "agent.actions=scale", "ppo.credit=position", "pretrain.enabled=false", "prior.kl=0",
                 "agent.lstm1_hidden=8", "agent.mlp_hidden=8", "agent.lstm2_hidden=8", "train.num_envs=8",
                 "ppo.num_steps=32", "train.eval_every=1", "output.checkpoint_every=1", "output.keep_last=10"]


def test_the_learning_curve_walks_every_kept_checkpoint_beside_the_validation_walk_of_its_update(tmp_path, capsys):
    """A run that kept a checkpoint each update gives one row per update, in order, each with the trainer's own
    validation walk at that step and the same test measurement as the certificate's (a scale agent's multiple on
    rich bars less the others lies within the multiples' range)."""
    import json

    from clstm_ppo.cli import run_cli
    from clstm_ppo.train import main as train_main
    args = ["--config", "planted", "--checkpoint-dir", str(tmp_path), "--run-name", "run", "--total-steps", "768"]
    for setting in SMALL_PLANTED:
        args += ["--set", setting]
    assert run_cli(train_main, args) == 0
    capsys.readouterr()
    rows_file = tmp_path / "curve.csv"
    assert curve_main()([str(tmp_path / "run"), "--rows", str(rows_file), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]  # the JSON object comes last
    assert [r["update"] for r in rows] == [1, 2, 3] and [r["env_steps"] for r in rows] == [256, 512, 768]
    assert all(r["val_composite"] is not None and -1.5 <= r["sell_timing"] <= 1.5 for r in rows)
    import csv
    with rows_file.open() as fh:
        kept = list(csv.DictReader(fh))
    assert len(kept) == 3 and all(r["commit"] and r["checkpoint"].endswith(".pt") for r in kept)
    assert curve_main()([str(tmp_path / "nothing-here")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a run folder" in err[0]
