"""A 24/7 market of 15-minute bars end to end: the seeded synthetic market on a crypto clock, trained on the smoke
budget and evaluated, its report in its own bars and every annualised figure at 35,040 bars a year; and `evaluate
--data --json` on files of each clock (hourly 24/5 FX, 15-minute 24/7 crypto, 5-minute exchange-hours stocks)
against pandas from the files' own timestamps."""
import math

import numpy as np
import pandas as pd
import pytest
from conftest import strict_loads
from test_calendar import MARKETS, YEAR, write_bars

from clstm_ppo.cli import run_cli
from clstm_ppo.evaluate import main as evaluate_main
from clstm_ppo.train import main as train_main

CRYPTO = ["--set", "data.synthetic.interval=15min", "--set", "data.synthetic.hours=24/7"]
WALK = 400  # bars in each of the validation and test splits of the evaluate --data walks: enough, and quick


@pytest.fixture(scope="module")
def crypto_run(tmp_path_factory):
    """A quarter of the smoke budget (10 updates: one validation walk, so best_composite.pt) trained once on the
    synthetic crypto market: the run's folder. The tests read its bars and clock, not its skill."""
    folder = tmp_path_factory.mktemp("checkpoints")
    assert run_cli(train_main, ["--config", "smoke", "--checkpoint-dir", str(folder), "--run-name", "crypto",
                                "--total-steps", "5120", "--set", "launch.threads_per_worker=1", *CRYPTO]) == 0
    return folder / "crypto"


def test_a_15_minute_24_7_market_trains_and_evaluates_in_its_own_bars(crypto_run, tmp_path, capsys):
    report, returns = tmp_path / "report.json", tmp_path / "returns.csv"
    capsys.readouterr()
    assert run_cli(evaluate_main, ["--checkpoint", str(crypto_run / "best_composite.pt"),
                                   "--json", str(report), "--returns", str(returns)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("test split walked 2000-01-") and "returns of bars of 15 min, 24/7, 96 a day)" \
        in lines[0]
    assert any(line.startswith("Backtest ") and line.endswith(
        "returns of bars of 15 min, 24/7, 96 a day: 35,040 bars a year, from the data; excess_annual against "
        "buy_and_hold") for line in lines)
    year_headers = [line.split() for line in lines if line.startswith("policy") and "max_drawdown" in line]
    assert all("days" not in header for header in year_headers) and year_headers[-1][1] == "bars"
    saved = strict_loads(report.read_text())
    assert saved["clock"] == {"interval": "15 min", "interval_seconds": 900.0, "hours": "24/7", "bars_per_day": 96.0,
                              "periods_per_year": 35040.0, "measured_periods_per_year": 35040.0,
                              "set_by": "the data"}
    bars = pd.read_csv(returns, index_col="date", parse_dates=True)
    assert bars.index.is_unique and (bars.index[1] - bars.index[0]) == pd.Timedelta(minutes=15)
    per_year = (len(bars) - 1) / ((bars.index[-1] - bars.index[0]) / YEAR)  # counted from the stamps
    for policy in ("agent", "buy_and_hold"):
        r, got = bars[policy], saved["policies"][policy]["SYN0"]
        assert got["bars"] == len(r)
        assert got["sharpe"] == pytest.approx(math.sqrt(35040) * r.mean() / r.std(), rel=1e-9)
        assert got["sharpe"] == pytest.approx(math.sqrt(per_year) * r.mean() / r.std(), rel=0.01)
        assert got["annual_vol"] == pytest.approx(math.sqrt(per_year) * r.std(), rel=0.01)
        growth = (1 + r).prod()
        assert got["annual_return"] == pytest.approx(growth ** (35040 / len(r)) - 1, rel=1e-9)
        if got["max_drawdown"] > 0:  # an intraday walk's drawdown is dated to the bar
            assert pd.Timestamp(got["max_drawdown_trough"]) in bars.index


@pytest.mark.parametrize("name", MARKETS)
def test_evaluate_json_on_an_intraday_file_annualises_as_pandas_does(crypto_run, tmp_path, name):
    """Buy-and-hold of the file's underlying, walked by `evaluate --data FILE --json` (no costs, dividends or
    carry), against pandas: the account buys at the walk's second bar's open (docs/BACKTEST.md) and holds to the
    last close; bars a year are counted from the file's timestamps. Opens sit a little off the previous close, so
    none is stale."""
    frame = write_bars(tmp_path / f"{name}.csv", MARKETS[name][0]())
    rng = np.random.default_rng(2)
    frame["Open"] = frame["Close"].shift(1, fill_value=100.0) * (1 + rng.choice([-1, 1], len(frame))
                                                                  * rng.uniform(1e-4, 3e-4, len(frame)))
    frame["High"] = np.maximum(frame["Open"], frame["Close"]) * 1.0004
    frame["Low"] = np.minimum(frame["Open"], frame["Close"]) * 0.9996
    frame.to_csv(tmp_path / f"{name}.csv", index=False)
    share = WALK / len(frame)
    report = tmp_path / "report.json"
    assert run_cli(evaluate_main, ["--checkpoint", str(crypto_run / "best_composite.pt"), "--data",
                                   str(tmp_path / f"{name}.csv"), "--json", str(report),
                                   "--set", f"data.train_frac={1 - 2 * share}", "--set", f"data.val_frac={share}",
                                   "--set", "market.costs.share_cost_bps=0", "--set", "market.dividend_yield=0",
                                   "--set", "market.risk_free_rate=0"]) == 0
    saved = strict_loads(report.read_text())
    stamps = pd.to_datetime(frame["Date"], utc=True).dt.tz_localize(None)
    per_year = (len(frame) - 1) / ((stamps.iloc[-1] - stamps.iloc[0]) / YEAR)
    walk = frame[(stamps >= pd.Timestamp(saved["dates"][0])) & (stamps <= pd.Timestamp(saved["dates"][1]))]
    close, open_ = walk["Close"].to_numpy(), walk["Open"].to_numpy()
    equity = pd.Series(np.concatenate([[1.0], close[1:] / open_[1]]))
    r = equity.pct_change().dropna()
    got = saved["policies"]["buy_and_hold"][name]
    assert got["bars"] == len(r) and abs(len(r) - WALK) < 0.05 * WALK
    assert saved["clock"]["periods_per_year"] == pytest.approx(per_year, rel=0.005)
    assert got["annual_vol"] == pytest.approx(r.std() * math.sqrt(per_year), rel=0.01)
    assert got["sharpe"] == pytest.approx(r.mean() / r.std() * math.sqrt(per_year), rel=0.01)
    assert math.log1p(got["annual_return"]) == pytest.approx(math.log(equity.iloc[-1]) * per_year / len(r), rel=0.01)
