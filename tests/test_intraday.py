"""A 24/7 market of 15-minute bars end to end: the seeded synthetic market on a crypto clock, trained on the smoke
budget and evaluated, its report in its own bars and every annualised figure at 35,040 bars a year."""
import math

import pandas as pd
import pytest
from conftest import strict_loads

from clstm_ppo.cli import run_cli
from clstm_ppo.evaluate import main as evaluate_main
from clstm_ppo.train import main as train_main

CRYPTO = ["--set", "data.synthetic.interval=15min", "--set", "data.synthetic.hours=24/7"]
YEAR = pd.Timedelta(days=365.25)


def test_a_15_minute_24_7_market_trains_and_evaluates_in_its_own_bars(tmp_path, capsys):
    assert run_cli(train_main, ["--config", "smoke", "--checkpoint-dir", str(tmp_path), "--run-name", "crypto",
                                "--set", "train.threads_per_worker=1", *CRYPTO]) == 0
    report, returns = tmp_path / "report.json", tmp_path / "returns.csv"
    capsys.readouterr()
    assert run_cli(evaluate_main, ["--checkpoint", str(tmp_path / "crypto" / "best_composite.pt"),
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
