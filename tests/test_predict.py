"""python -m clstm_ppo.predict: the agent's next decision on a file's last bar, valid under the mask."""
import json
import subprocess
import sys

import pytest
from conftest import make_bars, strict_loads
from test_train import SMOKE

from clstm_ppo.cli import run_cli
from clstm_ppo.predict import main as predict_main
from clstm_ppo.train import main as train_main


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("predict")
    assert run_cli(train_main, ["--config", SMOKE, "--checkpoint-dir", str(root), "--total-steps", "1024"]) == 0
    return root / "synthetic-smoke" / "latest.pt"


@pytest.fixture(scope="module")
def bars(tmp_path_factory):
    path = tmp_path_factory.mktemp("bars") / "SPY.csv"
    make_bars(600, seed=7).to_csv(path, index=False)
    return path


def decide(capsys, *args: str) -> dict:
    assert run_cli(predict_main, [*args, "--json"]) == 0
    return strict_loads(capsys.readouterr().out.strip().splitlines()[-1])["decisions"][0]


def test_predict_gives_a_valid_action_for_the_bar_after_the_files_last(checkpoint, bars, capsys):
    decision = decide(capsys, "--checkpoint", str(checkpoint), "--data", str(bars))
    assert decision["date"] == make_bars(600, seed=7)["Date"].iloc[-1]
    assert decision["valid"][decision["action"]], "the chosen action is valid under the mask"
    probabilities = decision["probabilities"]
    assert abs(sum(probabilities) - 1) < 1e-5
    assert all(p < 1e-6 for p, ok in zip(probabilities, decision["valid"], strict=True) if not ok)
    assert decision["portfolio"]["open_share"] == 0.0 and decision["portfolio"]["cash_share"] == 1.0


def test_predict_with_a_book_of_positions_sees_them(checkpoint, bars, tmp_path, capsys):
    last_close = float(make_bars(600, seed=7)["Close"].iloc[-1])
    book = [{"right": "put", "strike": round(last_close), "expiry": "2099-01-15", "contracts": 10, "paid": 4000.0},
            {"right": "call", "strike": round(last_close * 1.05), "expiry": "2099-02-19", "contracts": 5, "paid": 900}]
    path = tmp_path / "book.json"
    path.write_text(json.dumps(book))
    decision = decide(capsys, "--checkpoint", str(checkpoint), "--data", str(bars), "--positions", str(path))
    assert decision["portfolio"]["open_share"] == pytest.approx(2 / 5)
    assert decision["portfolio"]["margin_share"] == 0.0
    book[0]["side"] = "short"  # a put sold for $4,000: it needs margin, and its value counts against the book
    path.write_text(json.dumps(book))
    short = decide(capsys, "--checkpoint", str(checkpoint), "--data", str(bars), "--positions", str(path))
    assert short["portfolio"]["margin_share"] > 0 and short["valid"][short["action"]]
    assert short["portfolio"]["cash_share"] > decision["portfolio"]["cash_share"], "the sale brought cash in"
    assert decision["valid"][decision["action"]]
    assert decision["valid"][-3], "with positions open, closing them is valid"
    path.write_text(json.dumps([{"right": "straddle", "strike": 1}]))
    assert run_cli(predict_main, ["--checkpoint", str(checkpoint), "--data", str(bars), "--positions", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --positions") and "needs right, strike, expiry, contracts, paid" in err
    assert err.count("\n") == 1


def test_a_position_that_has_already_expired_is_one_line(checkpoint, bars, tmp_path, capsys):
    path = tmp_path / "old.json"
    path.write_text(json.dumps([{"right": "call", "strike": 100, "expiry": "2001-01-19", "contracts": 1,
                                 "paid": 300}]))
    assert run_cli(predict_main, ["--checkpoint", str(checkpoint), "--data", str(bars), "--positions", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --positions") and "expiring 2001-01-19 has expired" in err and err.count("\n") == 1


def test_predict_runs_from_the_command_line(checkpoint, bars):
    out = subprocess.run([sys.executable, "-m", "clstm_ppo.predict", "--checkpoint", str(checkpoint), "--data",
                          str(bars)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "to fill at the next bar's open" in out.stdout


def test_the_python_call_gives_the_commands_decision_and_book(checkpoint, bars, tmp_path, capsys):
    """next_decisions from Python: the decision --json prints, and the book the command describes."""
    from clstm_ppo.backtest.next_decision import next_decisions, read_book

    last_close = float(make_bars(600, seed=7)["Close"].iloc[-1])
    path = tmp_path / "book.json"
    path.write_text(json.dumps([{"right": "put", "strike": round(last_close), "expiry": "2099-01-15",
                                 "contracts": 10, "paid": 4000.0}]))
    printed = decide(capsys, "--checkpoint", str(checkpoint), "--data", str(bars), "--positions", str(path))
    done = next_decisions(checkpoint, str(bars), book=read_book(path))
    assert strict_loads(json.dumps(done.decisions[0])) == printed
    assert done.positions == [1] and done.closes == [pytest.approx(last_close)]
    assert len(done.action_names) == len(printed["probabilities"])
    assert done.action_names[printed["action"]] == printed["action_name"]
