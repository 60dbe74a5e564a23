"""Stress tests (evaluate --scenarios): every policy walks every generated path, of a generator or of a baseline
fitted on the agent's training years; a source failing the scenario goals says so in one line above the table; the
statistics equal a numpy computation; bad input is one line and exit 2."""

import numpy as np
import pytest
import torch
from conftest import make_bars, strict_loads

from clstm_ppo.agent.from_checkpoint import load_agent
from clstm_ppo.backtest.policies import agent_policy
from clstm_ppo.backtest.stress import QUANTILES, policy_stats, walk_paths
from clstm_ppo.backtest.walk import walk
from clstm_ppo.cli import run_cli
from clstm_ppo.config import DataConfig, load_config, to_dict
from clstm_ppo.data import build_market_data
from clstm_ppo.evaluate import main as evaluate_main
from clstm_ppo.run_files.run_state import save_checkpoint
from clstm_ppo.scenarios.fit import FitOptions, fit_generator
from clstm_ppo.scenarios.market import sample_market_data
from clstm_ppo.tables import strict_json
from clstm_ppo.training.runner import Trainer

POLICIES = ["agent", "buy_and_hold", "putwrite", "buywrite", "cash", "random", "macd_rule", "long_straddle",
            "best_rule"]
TINY = FitOptions(steps=3, seq_len=12, batch_size=16, settings={"hidden": 8, "n_critic": 2}, progress=False)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """An untrained smoke agent (a walk needs weights, not skill) and tiny generators fitted on its data."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("stress")
    cfg = load_config("smoke", [])
    trainer = Trainer(cfg, root / "run", torch.device("cpu"))
    save_checkpoint(trainer.run_state(), root / "agent.pt")
    for kind in ("cgan", "wgan_gp"):
        fit_generator(trainer.data, kind, root / f"{kind}.pt", TINY, torch.device("cpu"), data_config=to_dict(cfg.data))
    return root


def _run(capsys, *argv):
    code = run_cli(evaluate_main, list(argv))
    return code, capsys.readouterr()


def test_stress_command_walks_every_policy_over_every_path(setup, tmp_path, capsys):
    report, fan = tmp_path / "stress.json", tmp_path / "fan.png"
    code, out = _run(capsys, "--checkpoint", str(setup / "agent.pt"), "--scenarios", str(setup / "cgan.pt"),
                     "--regime", "crash", "--paths", "3", "--length", "30", "--json", str(report), "--plot", str(fan))
    assert code == 0, out.err
    saved = strict_loads(report.read_text())
    assert list(saved["policies"]) == POLICIES and saved["paths"] == 3 and saved["bars"] == 30
    assert all(p["paths"] == 3 for p in saved["policies"].values())
    assert saved["regime"] == "crash" and "0.5 x initial cash" in saved["ruin"]
    header = next(line for line in out.out.splitlines() if line.startswith("policy"))
    assert header.split() == ["policy", *[f"ret{round(100 * q)}" for q in QUANTILES],
                              *[f"mdd{round(100 * q)}" for q in QUANTILES], "cvar5", "p_ruin"]
    assert fan.stat().st_size > 10_000


def test_walk_paths_walks_each_path_once_and_keeps_its_own_equity(setup):
    cfg, data, model = load_agent(str(setup / "agent.pt"), None, [], torch.device("cpu"))
    markets = sample_market_data(setup / "cgan.pt", 4, 25, None, 7, data_config=cfg.data, normalizer=data.normalizer,
                                 market=cfg.market)
    seen = []

    def walk_all(market):
        seen.append(id(market))
        policy, state = agent_policy(model, 1, "cpu")
        return {"agent": walk("agent", policy, state, market, "test", cfg, "cpu")}

    result = walk_paths(markets, walk_all, cfg.env.initial_cash, cfg.env.ruin_fraction)
    assert seen == [id(m) for m in markets]  # every path, in order, once
    assert result.equity["agent"].shape == (4, 25)
    policy, state = agent_policy(model, 1, "cpu")
    again = walk("agent", policy, state, markets[2], "test", cfg, "cpu").equity[0]
    np.testing.assert_array_equal(result.equity["agent"][2], again)
    closes = np.stack([m.bars["close"][0, m.splits["test"][0]:] for m in markets])
    assert len({tuple(np.round(c, 6)) for c in closes}) == 4  # four different paths


def test_statistics_equal_a_numpy_computation():
    rng = np.random.default_rng(0)
    equity = 1e6 * np.cumprod(1 + rng.normal(0, 0.02, (40, 60)), axis=1)
    equity[:, 0] = 1e6
    equity[3, 20] = 4.9e5  # one path dips below half the initial cash, then recovers
    s = policy_stats(equity, 1e6, 0.5)
    total = equity[:, -1] / 1e6 - 1
    np.testing.assert_allclose(list(s["total_return"].values()), np.percentile(total, [5, 25, 50, 75, 95]))
    mdd = [max((np.max(e[:i + 1]) - e[i]) / np.max(e[:i + 1]) for i in range(len(e))) for e in equity]
    np.testing.assert_allclose(list(s["max_drawdown"].values()), np.percentile(mdd, [5, 25, 50, 75, 95]))
    assert s["cvar5"] == pytest.approx(np.sort(total)[:2].mean())  # the worst 5% of 40 paths: two
    daily = np.diff(equity, axis=1) / equity[:, :-1]
    per_path = [np.sort(r)[:2].mean() for r in daily]  # 5% of 59 returns: floor 2
    assert s["daily_cvar5"]["q50"] == pytest.approx(np.median(per_path))
    expected_ruin = np.mean([(e < 5e5).any() for e in equity])
    assert s["p_ruin"] == pytest.approx(expected_ruin) and s["ruined_paths"] >= 1
    assert policy_stats(equity, 1e6, 0.0)["p_ruin"] == 0.0  # fraction 0: ruin only at equity <= 0


def test_bad_stress_input_is_one_line_and_exit_2(setup, tmp_path, capsys):
    other = tmp_path / "plain.csv"  # volume but no iv column: another feature set than the agent's data
    make_bars(700).to_csv(other, index=False)
    plain = build_market_data(DataConfig(source=str(other), window=10, turbulence_lookback=50))
    fit_generator(plain, "wgan_gp", tmp_path / "plain.pt", TINY, torch.device("cpu"))
    agent = str(setup / "agent.pt")
    capsys.readouterr()  # what fitting printed
    cases = [
        (["--scenarios", str(setup / "wgan_gp.pt"), "--regime", "crash"], "trained with regimes: none"),
        (["--scenarios", str(setup / "cgan.pt"), "--regime", "boom"], "bull, bear, sideways, crash"),
        (["--scenarios", str(tmp_path / "plain.pt")], "the agent's data has gap, ret, up, down, dvol, logiv"),
        (["--scenarios", agent], "is an agent checkpoint"),
        (["--scenarios", str(tmp_path / "none.pt")], "not found"),
        (["--regime", "crash"], "--regime needs --scenarios"),
        (["--scenarios", str(setup / "cgan.pt"), "--returns", str(tmp_path / "r.csv")], "--returns is for one"),
        (["--scenarios", "fhs", "--regime", "crash"], "the fhs baseline has no regimes"),
        (["--scenarios", "fhs", "--folds"], "takes no folds"),
    ]
    for flags, expected in cases:
        code, out = _run(capsys, "--checkpoint", agent, *flags)
        assert code == 2, (flags, out.err)
        assert out.err.startswith("error: ") and out.err.count("\n") == 1 and expected in out.err, out.err


def test_a_failing_generator_says_so_above_its_table(setup, tmp_path, capsys):
    """A 3-step cGAN meets none of the goals: one warning line, right above the table, and the walk still runs."""
    code, out = _run(capsys, "--checkpoint", str(setup / "agent.pt"), "--scenarios", str(setup / "cgan.pt"),
                     "--paths", "2", "--length", "20", "--json", str(tmp_path / "s.json"))
    assert code == 0, out.err
    lines = out.out.splitlines()
    warning = [i for i, line in enumerate(lines) if line.startswith("warning: cgan")]
    assert len(warning) == 1 and "fails the scenario goals (" in lines[warning[0]]
    assert "generated paths" in lines[warning[0] + 1] and lines[warning[0] + 2].startswith("policy")
    assert strict_loads((tmp_path / "s.json").read_text())["goals_warning"] == lines[warning[0]]


@pytest.mark.parametrize("name", ["fhs", "garch_t", "bootstrap"])
def test_a_baseline_by_name_is_fitted_on_the_agent_s_training_years(setup, tmp_path, capsys, name):
    report = tmp_path / "stress.json"
    code, out = _run(capsys, "--checkpoint", str(setup / "agent.pt"), "--scenarios", name, "--paths", "2",
                     "--length", "20", "--json", str(report))
    assert code == 0, out.err
    saved = strict_loads(report.read_text())
    assert list(saved["policies"]) == POLICIES and saved["paths"] == 2 and saved["bars"] == 20
    assert saved["generator"] == f"the {name} baseline"


def test_the_python_call_reports_what_the_command_writes(setup, tmp_path, capsys):
    """stress_checkpoints from Python: the same paths, walks and report as `evaluate --scenarios ... --json`."""
    from clstm_ppo.backtest.stress_checkpoints import stress_checkpoints

    report = tmp_path / "stress.json"
    code, out = _run(capsys, "--checkpoint", str(setup / "agent.pt"), "--scenarios", str(setup / "wgan_gp.pt"),
                     "--paths", "2", "--length", "20", "--device", "cpu", "--json", str(report))
    assert code == 0, out.err
    done = stress_checkpoints([str(setup / "agent.pt")], setup / "wgan_gp.pt", paths=2, length=20, device="cpu")
    assert strict_loads(report.read_text()) == strict_loads(strict_json(done.report, default=str))
    assert set(done.result.equity) == set(POLICIES) and done.result.equity["agent"].shape == (2, 20)
    assert done.rule.line("test") in out.out
