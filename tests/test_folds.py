"""Walk-forward folds: the fold dates, nothing fitted on a fold reads past its training years,
no bar after its test block is loaded, and evaluate --folds lays the folds' walks end to end."""
import dataclasses

import numpy as np
import pandas as pd
import pytest
from conftest import make_bars, strict_loads

from clstm_ppo.backtest.calibration import calibrate, calibration_years, cboe_data, fold_market_settings
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.stitch import stitch
from clstm_ppo.cli import run_cli
from clstm_ppo.config import DataConfig, MarketConfig
from clstm_ppo.data import DataError, build_market_data
from clstm_ppo.data.calendar import detect_clock
from clstm_ppo.data.folds import Fold, annual_folds, folds_of, walk_forward_folds
from clstm_ppo.evaluate import main as evaluate_main
from clstm_ppo.market.inputs import fit_iv_model, market_inputs
from clstm_ppo.train import main as train_main


def test_three_folds_on_the_sp500_are_the_issues_expanding_blocks_of_three_years():
    dates = build_market_data(DataConfig(source="sp500")).dates
    assert walk_forward_folds(dates, 3) == [Fold(0, "2006-12-31", "2009-12-31", "2012-12-31"),
                                            Fold(1, "2009-12-31", "2012-12-31", "2015-12-31"),
                                            Fold(2, "2012-12-31", "2015-12-31", "2018-12-31")]


def test_a_partial_last_year_joins_the_last_test_block():
    dates = pd.bdate_range("2010-01-27", "2020-01-24")  # the Dow stocks after warm-up
    folds = walk_forward_folds(dates, 2)
    assert folds == [Fold(0, "2013-12-31", "2015-12-31", "2017-12-31"), Fold(1, "2015-12-31", "2017-12-31",
                                                                          "2020-01-24")]
    assert folds[1].settings() == ["data.train_end=2015-12-31", "data.val_end=2017-12-31",
                                   "data.test_end=2020-01-24"]


def test_too_few_years_for_the_folds_is_one_line():
    with pytest.raises(DataError, match=r"spans 5 whole year\(s\).*3 walk-forward fold\(s\) need at least 6"):
        walk_forward_folds(pd.bdate_range("2001-01-01", "2005-12-31"), 3)
    with pytest.raises(DataError, match="--folds must be at least 1"):
        walk_forward_folds(pd.bdate_range("2001-01-01", "2015-12-31"), 0)


def test_annual_folds_test_each_year_after_three_training_years_and_a_validation_year():
    dates = build_market_data(DataConfig(source="sp500")).dates  # bars from 2000-01-04 after warm-up
    folds = annual_folds(dates)
    assert len(folds) == 15 and folds_of(dates, "annual") == folds
    assert folds[0] == Fold(0, "2002-12-31", "2003-12-31", "2004-12-31")  # trains on 2000, 2001, 2002
    assert folds[-1] == Fold(14, "2016-12-31", "2017-12-31", "2018-12-31")
    for a, b in zip(folds[:-1], folds[1:], strict=True):  # the test years tile 2004..2018, each year once
        assert b.val_end == a.test_end and int(b.test_end[:4]) == int(a.test_end[:4]) + 1
    assert folds_of(dates, "3") == walk_forward_folds(dates, 3)


def test_annual_folds_join_a_partial_last_year_and_refuse_too_short_data():
    dow = pd.bdate_range("2010-01-27", "2020-01-24")  # the Dow stocks after warm-up
    folds = annual_folds(dow)
    assert [f.test_end for f in folds] == [f"{y}-12-31" for y in range(2014, 2019)] + ["2020-01-24"]
    with pytest.raises(DataError, match="annual folds need 3 training years, a validation year and a test year"):
        annual_folds(pd.bdate_range("2001-01-01", "2004-12-31"))
    with pytest.raises(DataError, match="--folds 'yearly': give a number of walk-forward folds or 'annual'"):
        folds_of(dow, "yearly")


def test_the_annual_fold_whose_fits_are_checked_below_is_one_annual_folds_makes():
    """test_every_fit_of_a_fold_reads_only_its_training_years alters every bar after the fold's training years and
    finds every fit unchanged; that fold is the annual fold testing 2006 of these bars."""
    dates = pd.bdate_range("2001-01-01", "2008-08-01")  # the span of make_bars(2000, start="2001-01-01")
    assert Fold(1, "2004-12-31", "2005-12-31", "2006-12-31") in annual_folds(dates)


def with_iv(bars: pd.DataFrame, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return bars.assign(IV=0.2 * np.exp(np.cumsum(rng.normal(0, 0.02, len(bars)))))


def later_changed(bars: pd.DataFrame, after: str) -> pd.DataFrame:
    """Another market after ``after``: every price, volume and implied vol of those bars changed."""
    later = (bars["Date"] > after).to_numpy()
    changed = bars.copy()
    rng = np.random.default_rng(7)
    shock = np.exp(np.cumsum(rng.normal(-0.003, 0.04, later.sum())))
    for column in ("Open", "High", "Low", "Close"):
        changed.loc[later, column] = bars.loc[later, column].to_numpy() * shock
    changed.loc[later, "Volume"] = rng.integers(10_000, 9_000_000, later.sum())
    changed.loc[later, "IV"] = bars.loc[later, "IV"].to_numpy() * 3.0
    return changed


def test_every_fit_of_a_fold_reads_only_its_training_years(tmp_path):
    bars = with_iv(make_bars(2000, seed=4, start="2001-01-01"), 4)  # 2001 .. mid 2008
    fold = Fold(0, "2004-12-31", "2005-12-31", "2006-12-31")
    fitted = {}
    for name, frame in (("a", bars), ("b", later_changed(bars, fold.train_end))):
        path = tmp_path / f"{name}.csv"
        frame.to_csv(path, index=False)
        cfg = DataConfig(source=str(path), window=10, turbulence_lookback=60, train_end=fold.train_end,
                         val_end=fold.val_end, test_end=fold.test_end)
        data = build_market_data(cfg)
        inputs = market_inputs(data, MarketConfig())
        settings = fold_market_settings(fold, cfg, MarketConfig())
        fitted[name] = (data, inputs, settings)
    (a, ia, sa), (b, ib, sb) = fitted["a"], fitted["b"]
    train = slice(*a.splits["train"])
    assert not np.allclose(a.raw_features[:, a.splits["test"][0]:], b.raw_features[:, b.splits["test"][0]:])
    np.testing.assert_array_equal(a.raw_features[:, train], b.raw_features[:, train])
    assert a.normalizer.state_dict().keys() == b.normalizer.state_dict().keys()
    for key, value in a.normalizer.state_dict().items():
        np.testing.assert_array_equal(np.asarray(value), np.asarray(b.normalizer.state_dict()[key]), err_msg=key)
    assert a.turbulence_threshold == b.turbulence_threshold
    np.testing.assert_array_equal(ia.long_run_iv, ib.long_run_iv)
    assert sa["iv_model_source"] == "own iv column" and sa["iv_model_coefs"] == sb["iv_model_coefs"]
    assert sa["atm_per_iv"] == sb["atm_per_iv"]


def test_the_atm_per_iv_calibration_walks_only_the_training_years():
    data = cboe_data("2004-12-31", "2006-12-31")
    start = data.splits["validation"][0]
    changed = dataclasses.replace(data, bars={k: v.copy() for k, v in data.bars.items()})
    for key in ("open", "high", "low", "close", "iv", "iv_open"):
        changed.bars[key][:, start:] *= 1.5
    years = calibration_years("2004-12-31")
    assert years == [2000, 2001, 2002, 2003, 2004]
    assert calibrate(data, years, [0.85, 0.95]) == calibrate(changed, years, [0.85, 0.95])


def test_a_fold_of_stocks_testing_after_the_vix_ends_fits_on_the_reference_training_years(tmp_path):
    # the Dow stocks run to January 2020, the S&P 500 and its VIX end with 2018: the last annual fold
    # validates on 2018 and tests on 2019, so the reference has no test bars at all
    stock = make_bars(2000, seed=6, start="2012-06-01")  # no IV column: the IV model comes from the VIX
    (tmp_path / "stock.csv").write_text(stock.to_csv(index=False))
    fold = Fold(0, "2017-12-31", "2018-12-31", "2019-12-31")
    cfg = DataConfig(source=str(tmp_path / "stock.csv"), window=10, turbulence_lookback=60,
                     train_end=fold.train_end, val_end=fold.val_end, test_end=fold.test_end)
    settings = fold_market_settings(fold, cfg, MarketConfig())
    # the same training years with a reference split that keeps bars after them: the same fits
    reference = build_market_data(DataConfig(source="sp500", train_end="2017-12-31", val_end="2018-06-30"))
    assert settings["iv_model_source"] == "sp500"
    assert settings["iv_model_coefs"] == [round(c, 4) for c in fit_iv_model(reference, MarketConfig())]
    years = calibration_years(fold.train_end)
    best = min(calibrate(cboe_data("2017-12-31", "2018-06-30"), years), key=lambda r: r["mean_mad"])
    assert settings["atm_per_iv"] == best["atm_per_iv"] and settings["atm_per_iv_mad"] == best["mean_mad"]
    # a run still needs every split of its own data
    with pytest.raises(DataError, match=r"test split \(empty, after indicator warm-up\) has 0 bars"):
        build_market_data(DataConfig(source="sp500", train_end="2017-12-31", val_end="2018-12-31"))


def test_no_bar_after_test_end_is_loaded(tmp_path):
    bars = make_bars(1200, seed=5, start="2001-01-01")
    (tmp_path / "a.csv").write_text(bars.to_csv(index=False))
    data = build_market_data(DataConfig(source=str(tmp_path / "a.csv"), window=10, turbulence_lookback=60,
                                        train_end="2002-12-31", val_end="2003-06-30", test_end="2003-12-31"))
    assert data.dates[-1] == pd.Timestamp("2003-12-31") and data.split_dates("test")[1] == data.dates[-1]
    with pytest.raises(DataError, match=r"data.val_end \(2003-06-30\) must come before data.test_end"):
        build_market_data(DataConfig(source=str(tmp_path / "a.csv"), window=10, turbulence_lookback=60,
                                     train_end="2002-12-31", val_end="2003-06-30", test_end="2003-01-31"))
    with pytest.raises(DataError, match="data.test_end 'soon' is not a date; write YYYY-MM-DD"):
        build_market_data(DataConfig(source=str(tmp_path / "a.csv"), test_end="soon"))


def walk_of(dates: list[str], equity: list[float], closed: int) -> WalkResult:
    n = len(dates)
    return WalkResult(policy="agent", symbols=["X"], dates=pd.DatetimeIndex(dates), equity=np.array([equity]),
                      rate=np.full((1, n), 0.01), closed=np.array([closed]), wins=np.array([1]),
                      open_at_end=np.array([0]), traded=np.array([10.0]), costs=np.ones((1, 3)),
                      ruin_fraction=0.5, clock=detect_clock(pd.DatetimeIndex(dates)),
                      option_pnl=np.array([5.0]))


def test_stitched_folds_chain_the_account_with_one_flat_day_per_later_fold():
    a = walk_of(["2020-01-02", "2020-01-03", "2020-01-06"], [100.0, 110.0, 121.0], 2)
    b = walk_of(["2020-01-07", "2020-01-08"], [100.0, 90.0], 3)
    s = stitch([a, b])
    assert list(s.dates.strftime("%m-%d")) == ["01-02", "01-03", "01-06", "01-07", "01-08"]
    np.testing.assert_allclose(s.equity[0], [100.0, 110.0, 121.0, 121.0, 108.9])
    np.testing.assert_allclose(s.daily_returns[0], [0.1, 0.1, 0.0, -0.1])
    assert s.closed[0] == 5 and s.wins[0] == 2 and s.option_pnl[0] == 10.0 and s.costs.sum() == 6.0
    with pytest.raises(ValueError, match="overlap or are out of order: one ends 2020-01-08, the next starts 2020-01-0"):
        stitch([a, b, b])


def test_evaluate_folds_walks_each_fold_on_its_own_test_years(tmp_path):
    runs = []
    for fold in (Fold(0, "2001-12-31", "2002-12-31", "2003-12-31"), Fold(1, "2002-12-31", "2003-12-31",
                                                                        "2004-12-31")):
        code = run_cli(train_main, ["--config", "smoke", "--data", "synthetic", "--checkpoint-dir", str(tmp_path),
                                    "--run-name", fold.name, "--total-steps", "256", "--eval-every", "1",
                                    "--set", "train.num_envs=8", *[x for s in fold.settings() for x in ("--set", s)]])
        assert code == 0
        runs.append(str(tmp_path / fold.name / "latest.pt"))
    report = tmp_path / "wf.json"
    assert run_cli(evaluate_main, ["--folds", "--checkpoint", runs[1], runs[0], "--json", str(report)]) == 0
    out = strict_loads(report.read_text())
    assert [f["dates"] for f in out["folds"]] == [["2003-01-01", "2003-12-31"], ["2004-01-01", "2004-12-31"]]
    assert out["dates"] == ["2003-01-01", "2004-12-31"]
    # Each fold's best_rule is picked on that fold's own validation year, the one before its test year.
    assert [f["best_rule"]["on"][len("validation "):][:10] for f in out["folds"]] == ["2002-01-01", "2003-01-01"]
    for policy in ("agent", "buy_and_hold", "best_rule"):
        symbol = next(iter(out["policies"][policy]))
        by_fold = [1 + f["policies"][policy][symbol]["total_return"] for f in out["folds"]]
        assert out["policies"][policy][symbol]["total_return"] == pytest.approx(np.prod(by_fold) - 1)
    assert run_cli(evaluate_main, ["--folds", "--checkpoint", runs[0], runs[0]]) == 2  # the same fold twice
    assert run_cli(evaluate_main, ["--folds", "--checkpoint", runs[0], "--scenarios", str(report)]) == 2

