"""Backtest reports (clstm_ppo.backtest.report): every number is checked against a plain numpy computation on the
returns CSV the report writes, so the CSV, the metrics and the tables have to agree with each other."""
from __future__ import annotations

import dataclasses
import json
import re
import socket
import sys

import numpy as np
import pandas as pd
import pytest

from clstm_ppo.backtest import charts, report
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.config import ConfigError
from clstm_ppo.data.calendar import detect_clock
from clstm_ppo.market import COST_KINDS

HOLIDAYS = ["2016-12-26", "2017-01-02", "2017-01-16", "2017-04-14", "2017-07-04", "2017-12-25", "2018-01-01"]
SYMBOLS = ["SPY", "QQQ"]
CRASH = 100  # buy_and_hold:QQQ falls 3% a day for 10 days from bar CRASH, and gains 0.1% every other day


def trading_days(start: str, end: str) -> pd.DatetimeIndex:
    """Weekdays without the exchange holidays: three-day weekends and holiday gaps, as real bars have."""
    days = pd.bdate_range(start, end)
    return days[~days.isin(pd.to_datetime(HOLIDAYS))]


def walk(policy: str, returns: np.ndarray, dates: pd.DatetimeIndex, rate: np.ndarray, seed: int = 0,
         symbols: list[str] = SYMBOLS, cash: float = 10_000.0, ruin_fraction: float = 0.5) -> WalkResult:
    """A WalkResult whose equity compounds the given (S, n) daily returns from ``cash``."""
    rng = np.random.default_rng(seed)
    equity = cash * np.concatenate([np.ones((len(symbols), 1)), np.cumprod(1 + returns, axis=1)], axis=1)
    return WalkResult(policy=policy, symbols=list(symbols), dates=dates, equity=equity, rate=rate,
                      closed=rng.integers(0, 30, len(symbols)), wins=rng.integers(0, 10, len(symbols)),
                      open_at_end=rng.integers(0, 3, len(symbols)), traded=rng.uniform(1e5, 1e6, len(symbols)),
                      costs=rng.uniform(0, 500, (len(symbols), len(COST_KINDS))), ruin_fraction=ruin_fraction,
                      clock=detect_clock(dates))


@pytest.fixture(scope="module")
def walks() -> dict[str, WalkResult]:
    dates = trading_days("2016-12-20", "2018-01-12")  # three calendar years, the first and last only partly
    n = len(dates) - 1
    rng = np.random.default_rng(1)
    rate = 0.01 + 0.01 * np.linspace(0, 1, n + 1) + np.array([[0.0], [0.002]])  # rising, differs per underlying
    crash = np.where(np.arange(n) % 2 == 0, 0.001, 0.0)
    crash[CRASH:CRASH + 10] = -0.03
    hold = np.stack([rng.normal(0.0005, 0.012, n), crash])
    agent = rng.normal(0.0003, 0.009, (2, n))
    agent = walk("ppo", agent, dates, rate, seed=2)
    agent.closed[1], agent.wins[1] = 0, 0  # an underlying on which the agent never closed a trade
    return {"agent": agent, "buy_and_hold": walk("buy_and_hold", hold, dates, rate, seed=3),
            "cash": walk("cash", np.zeros((2, n)), dates, rate, seed=4)}


@pytest.fixture(scope="module")
def csv(walks, tmp_path_factory) -> pd.DataFrame:
    path = tmp_path_factory.mktemp("report") / "returns.csv"
    report.write_returns_csv(walks, path)
    return pd.read_csv(path, index_col="date", parse_dates=True)


def reference(r: np.ndarray, dates: pd.DatetimeIndex, rate: np.ndarray) -> dict:
    """The metrics by hand: ``dates`` and ``rate`` cover the n + 1 closes that the n returns ``r`` span."""
    root = np.sqrt(252)
    gaps = np.array([(b - a).days for a, b in zip(dates[:-1], dates[1:], strict=True)], dtype=float)
    excess = r - (np.exp(rate[:-1] * gaps / 365) - 1)
    total = np.prod(1 + r) - 1
    annual = (1 + total) ** (252 / len(r)) - 1
    wealth = np.concatenate([[1.0], np.cumprod(1 + r)])
    best, best_i, worst, peak_i, trough_i = wealth[0], 0, 0.0, 0, 0
    for i, w in enumerate(wealth):  # a plain loop, unlike the report's vectorised running maximum
        if w >= best:
            best, best_i = w, i
        if (best - w) / best > worst:
            worst, peak_i, trough_i = (best - w) / best, best_i, i
    down = np.sqrt(np.mean(np.minimum(r, 0) ** 2))
    return {"total_return": total, "annual_return": annual, "annual_vol": np.std(r, ddof=1) * root,
            "sharpe": np.mean(r) / np.std(r, ddof=1) * root,
            "sharpe_excess": np.mean(excess) / np.std(excess, ddof=1) * root,
            "sortino": np.mean(r) / down * root, "max_drawdown": worst, "calmar": annual / worst,
            "max_drawdown_peak": dates[peak_i].date().isoformat(),
            "max_drawdown_trough": dates[trough_i].date().isoformat(), "min_equity": wealth.min()}


def assert_matches(got: dict, want: dict) -> None:
    for key, value in want.items():
        if isinstance(value, str):
            assert got[key] == value, key
        else:
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


def test_returns_csv_has_one_column_per_policy_and_underlying(walks, csv):
    assert list(csv.columns) == [f"{p}:{s}" for p in (*walks, "tbill") for s in SYMBOLS]
    dates = walks["agent"].dates
    assert list(csv.index) == list(dates[1:])
    for p, res in walks.items():
        for s, sym in enumerate(SYMBOLS):
            np.testing.assert_allclose(csv[f"{p}:{sym}"], res.equity[s, 1:] / res.equity[s, :-1] - 1, rtol=1e-12)


def test_returns_csv_with_one_underlying_names_columns_by_policy(walks, tmp_path):
    one = {p: walk(p, r.daily_returns[:1], r.dates, r.rate[:1], symbols=["SPY"]) for p, r in walks.items()}
    report.write_returns_csv(one, tmp_path / "r.csv")
    back = pd.read_csv(tmp_path / "r.csv")
    assert list(back.columns) == ["date", "agent", "buy_and_hold", "cash", "tbill"]
    assert back["date"].iloc[0] == walks["agent"].dates[1].date().isoformat()


def test_returns_csv_holds_the_tbill_so_excess_returns_match_the_report(walks, csv):
    """The tbill column is the T-bill's return over each bar: the returns less it are the reference's excess."""
    res = walks["agent"]
    gaps = np.array([(b - a).days for a, b in zip(res.dates[:-1], res.dates[1:], strict=True)], dtype=float)
    for s, sym in enumerate(SYMBOLS):  # each underlying's own rate
        np.testing.assert_allclose(csv[f"tbill:{sym}"], np.exp(res.rate[s, :-1] * gaps / 365) - 1, rtol=1e-9)


@pytest.mark.parametrize("policy", ["agent", "buy_and_hold"])
def test_whole_walk_metrics_equal_numpy_on_the_csv(walks, csv, policy):
    res = walks[policy]
    for s, sym in enumerate(SYMBOLS):
        got = report.underlying_metrics(res, s)
        assert_matches(got, reference(csv[f"{policy}:{sym}"].to_numpy(), res.dates, res.rate[s]))


def test_drawdown_dates_of_a_known_crash(walks):
    got = report.underlying_metrics(walks["buy_and_hold"], 1)
    dates = walks["buy_and_hold"].dates
    assert got["max_drawdown"] == pytest.approx(1 - 0.97**10)
    assert got["max_drawdown_peak"] == dates[CRASH].date().isoformat()  # the close before the first fall
    assert got["max_drawdown_trough"] == dates[CRASH + 10].date().isoformat()


def test_trade_turnover_and_cost_metrics(walks):
    res = walks["agent"]
    n = len(res.dates) - 1
    for s in range(2):
        got = report.underlying_metrics(res, s)
        assert got["trades"] == res.closed[s] and got["open_at_end"] == res.open_at_end[s]
        assert got["win_rate"] == (res.wins[s] / res.closed[s] if res.closed[s] else 0.0)
        assert got["turnover"] == pytest.approx(res.traded[s] / res.equity[s].mean() / (n / 252))
        assert got["costs"] == pytest.approx(res.costs[s].sum())
        for k, kind in enumerate(COST_KINDS):
            assert got[f"cost_{kind}"] == pytest.approx(res.costs[s, k])
    assert report.underlying_metrics(res, 1)["win_rate"] == 0.0  # no closed trade


@pytest.mark.parametrize("fraction, path, ruined", [
    (0.5, [1.0, 0.7, 0.51, 0.9, 1.3], False),  # lost 49% at worst, then recovered: not ruined
    (0.5, [1.0, 0.7, 0.49, 0.9, 1.3], True),  # below half the account once: ruined, recovery or not
    (0.0, [1.0, 0.3, 0.01, 0.2, 0.4], False),  # with no fraction only an account at or below 0 is ruined
    (0.0, [1.0, 0.3, 0.0, 0.0, 0.0], True),
    (0.0, [1.0, 0.3, -0.2, -0.2, -0.2], True),
])
@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")  # returns from a 0 close
def test_an_account_is_ruined_below_the_ruin_fraction_of_its_initial_cash(fraction, path, ruined):
    """The env's rule (where a training episode ends), applied to the walk's lowest close, which the walk itself
    does not stop at; min_equity reports that close as a share of the first."""
    dates = trading_days("2017-01-03", "2017-01-09")
    res = dataclasses.replace(walk("agent", np.zeros((1, 4)), dates, np.full((1, 5), 0.01), symbols=["X"],
                                   ruin_fraction=fraction), equity=50_000.0 * np.array([path]))
    got = report.underlying_metrics(res, 0)
    assert got["ruined"] is ruined
    assert got["min_equity"] == pytest.approx(min(path))


def test_yearly_metrics_equal_numpy_on_that_years_rows(walks, csv):
    res = walks["agent"]
    yearly = report.yearly_metrics(res)
    assert sorted(yearly) == [2016, 2017, 2018]
    years = csv.index.year
    for year in (2016, 2017, 2018):
        rows = np.flatnonzero(years == year)
        bars = np.arange(rows[0], rows[-1] + 2)  # the closes these returns span: last year's final close first
        for s, sym in enumerate(SYMBOLS):
            want = reference(csv[f"agent:{sym}"].to_numpy()[rows], res.dates[bars], res.rate[s, bars])
            assert_matches(yearly[year][sym], want)
            assert yearly[year][sym]["bars"] == len(rows)


def test_a_year_with_no_return_is_left_out():
    dates = trading_days("2016-12-30", "2017-03-01")  # the first bar alone in 2016: nothing returned in 2016
    res = walk("agent", np.full((2, len(dates) - 1), 0.001), dates, np.full((2, len(dates)), 0.01))
    assert list(report.yearly_metrics(res)) == [2017]


def test_flat_cash_curve_has_no_return_and_no_risk(walks):
    for s in range(2):
        got = report.underlying_metrics(walks["cash"], s)
        for key in ("total_return", "annual_return", "annual_vol", "sharpe", "sortino", "max_drawdown", "calmar"):
            assert got[key] == 0.0, key
        assert got["max_drawdown_peak"] == got["max_drawdown_trough"] == ""
        assert got["sharpe_excess"] < 0  # cash that earns nothing lags the T-bill rate every day
    for by_sym in report.yearly_metrics(walks["cash"]).values():
        assert all(m["sharpe"] == 0.0 and m["max_drawdown"] == 0.0 for m in by_sym.values())


def test_report_dict_is_json_and_keyed_by_the_names_given(walks):
    out = json.loads(json.dumps(report.report_dict(walks)))
    assert list(out["policies"]) == ["agent", "buy_and_hold", "cash"]  # the agent's result says "ppo"
    assert list(out["policies"]["agent"]) == SYMBOLS
    assert list(out["yearly"]["cash"]) == ["2016", "2017", "2018"]
    assert out["dates"] == ["2016-12-20", "2018-01-12"]
    assert out["policies"]["buy_and_hold"]["QQQ"]["max_drawdown"] == pytest.approx(1 - 0.97**10)


def test_policies_that_walked_other_dates_are_refused(walks):
    other = walk("cash", np.zeros((2, 9)), trading_days("2017-01-03", "2017-01-16"), np.zeros((2, 10)))
    with pytest.raises(ValueError, match="other dates"):
        report.report_dict({"agent": walks["agent"], "cash": other})


def check_columns(text: str) -> int:
    """Every table row splits into as many fields as its header, each ending (numbers) where its header ends."""
    tables = 0
    for block in text.split("\n\n"):
        header, *rows = block.splitlines()[1:]  # the block's first line is its title
        spans = [m.span() for m in re.finditer(r"\S+", header)]
        left = 2 if header.split()[1] == "underlying" else 1
        for row in rows:
            cells = [m.span() for m in re.finditer(r"\S+", row)]
            assert len(cells) == len(spans), row
            assert [c[0] for c in cells[:left]] == [h[0] for h in spans[:left]], row
            assert [c[1] for c in cells[left:]] == [h[1] for h in spans[left:]], row
        tables += 1
    return tables


def test_format_report_columns_align(walks):
    walks = dict(walks)
    big = walk("agent", walks["agent"].daily_returns, walks["agent"].dates, walks["agent"].rate, cash=3e9)
    big.costs[:] = 123_456_789.0  # long cells must still stand apart
    text = report.format_report({"agent": big, **{k: v for k, v in walks.items() if k != "agent"}})
    assert check_columns(text) == 2 + 3  # main table, costs table, one per calendar year
    assert "123,456,789.00" in text and "excess_annual" in text
    first = text.splitlines()[2].split()
    assert first[:2] == ["agent", "SPY"]
    one = {p: walk(p, r.daily_returns[:1], r.dates, r.rate[:1], symbols=["SPY"]) for p, r in walks.items()}
    text = report.format_report(one)
    assert check_columns(text) == 5 and "underlying" not in text


def test_equity_plot_is_a_real_image(walks, tmp_path):
    from matplotlib.image import imread

    charts.plot_equity(walks, tmp_path / "eq.png")
    assert (tmp_path / "eq.png").stat().st_size > 10_000
    pixels = imread(tmp_path / "eq.png")[..., :3]
    assert pixels.std() > 0.05  # lines, text and axes, not a blank canvas
    charts.plot_equity(walks, tmp_path / "eq.svg")
    assert "<svg" in (tmp_path / "eq.svg").read_text()[:2000]


def test_tearsheet_without_quantstats_says_how_to_install(walks, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "quantstats", None)  # import quantstats now raises ImportError
    for call in (charts.check_tearsheet, lambda: charts.write_tearsheet(walks, tmp_path / "t.html")):
        with pytest.raises(ConfigError) as err:
            call()
        assert "\n" not in str(err.value) and "pip install 'clstm_ppo[report]'" in str(err.value)
    assert not (tmp_path / "t.html").exists()


def test_tearsheet_is_written_offline(walks, tmp_path, monkeypatch):
    pytest.importorskip("quantstats")
    import matplotlib

    def no_network(*args, **kwargs):
        raise AssertionError("the tearsheet tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    font = list(matplotlib.rcParams["font.family"])
    charts.write_tearsheet(walks, tmp_path / "t.html")
    html = (tmp_path / "t.html").read_text()
    assert "agent" in html and "buy_and_hold" in html.lower()
    assert list(matplotlib.rcParams["font.family"]) == font  # quantstats' global restyling stays inside the call


def test_across_checkpoints_gives_numpy_mean_and_std():
    seeds = [{"sharpe": 0.5, "max_drawdown": 0.10, "trades": 12, "max_drawdown_peak": "2017-01-03"},
             {"sharpe": 1.1, "max_drawdown": 0.25, "trades": 30, "max_drawdown_peak": "2017-05-01"},
             {"sharpe": -0.2, "max_drawdown": 0.05, "trades": 7, "max_drawdown_peak": ""}]
    out = report.across_checkpoints(seeds)
    assert sorted(out) == ["max_drawdown", "sharpe", "trades"]  # dates are not averaged
    for key, stats in out.items():
        values = np.array([s[key] for s in seeds], dtype=float)
        assert stats["mean"] == pytest.approx(values.mean())
        assert stats["std"] == pytest.approx(values.std(ddof=1))
        assert stats["values"] == values.tolist()
    assert report.across_checkpoints(seeds[:1])["sharpe"] == {"mean": 0.5, "std": 0.0, "values": [0.5]}
