"""An account that cannot hold what the action space offers says so in one line (docs/MARKET.md, "Sizing"): the
S&P 500 at five times its prices under whole contracts, a $1.50 account under fractional ones; and a walk whose
every order was masked says so in its report."""
import dataclasses

import numpy as np
import pytest
import torch
from test_scale_free import prices_times

from clstm_ppo.backtest.report import format_report
from clstm_ppo.backtest.walk import walk
from clstm_ppo.config import Config, EnvConfig
from clstm_ppo.data.__main__ import main as data_main
from clstm_ppo.env import ActionSpace
from clstm_ppo.env.tradability import untradable_line, untradable_orders
from clstm_ppo.market.observed import observed_market_data


@pytest.fixture(scope="module")
def sp500():
    return observed_market_data(Config())


def whole_market():
    return dataclasses.replace(Config().market, sizing="whole")


def test_whole_contracts_of_the_sp500_at_five_times_its_prices_say_why_they_cannot_trade(sp500):
    """At 2,000-2,900 x 5 one contract's margin (the 0.95 put: ~$140k) or premium (the 0.95 call: ~$60k) is over
    5% of $1M on most test bars; the 1.05 calls and 0.95 puts bought stay under it. At x 1 every order fits."""
    five = prices_times(sp500, 5.0)
    assert untradable_line(sp500, "test", whole_market(), EnvConfig()) is None
    failing = untradable_orders(five, "test", whole_market(), EnvConfig())
    assert set(failing) == {"budget"}
    orders = failing["budget"]
    assert "sell put 0.95 x 30d" in orders and "sell call 1 x 30d" in orders and "buy call 1.05 x 30d" not in orders
    line = untradable_line(five, "test", whole_market(), EnvConfig())
    assert line.startswith(f"warning: on most bars of the test split a fresh account cannot hold {len(orders)} of the "
                           "24 option orders the action space offers (whole contracts)")
    assert "env.position_frac x equity ($50,000)" in line and "or set market.sizing fractional" in line
    assert "\n" not in line
    assert untradable_line(five, "test", Config().market, EnvConfig()) is None, "fractional contracts fit"


def test_an_account_too_small_for_any_order_says_raise_the_cash():
    data = observed_market_data(Config())
    line = untradable_line(data, "validation", Config().market, EnvConfig(initial_cash=1.5))
    assert "cannot hold 24 of the 24 option orders" in line and "(fractional contracts)" in line
    assert "the cash room (env.initial_cash $1.50 less the fee reserves)" in line
    assert line.endswith("(raise env.initial_cash)")


def test_a_notional_cap_below_one_contract_names_its_setting(sp500):
    line = untradable_line(sp500, "test", whole_market(), EnvConfig(max_order_notional=0.1))
    assert "cannot hold 24 of the 24" in line and "env.max_order_notional x equity ($100,000)" in line
    assert "raise env.max_order_notional (0: no cap), or set market.sizing fractional" in line


def test_the_data_command_prints_the_line_once_and_the_option_features(capsys):
    assert data_main(["--data", "sp500", "--set", "market.sizing=whole", "--set", "env.initial_cash=100000"]) == 0
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "on most bars of the train split" in warnings[0]
    assert "(so too on the validation and test splits)" in warnings[0]
    for name in ("iv ", "iv_premium", "iv_change_5", "iv_change_20", "iv_zscore"):
        assert any(line.startswith(name) for line in out.splitlines()), name
    assert "implied vol from the data's implied-vol column (the VIX" in out
    assert data_main(["--data", "sp500"]) == 0
    assert "warning:" not in capsys.readouterr().out


def test_a_walk_masked_to_hold_on_every_bar_says_so_in_its_report(sp500):
    """A policy that always orders the 0.95 x 30-day put sale, whole contracts at x 5: the mask makes every order
    hold, so the walk never trades, and the report says so."""
    cfg = Config()
    cfg.market = whole_market()
    actions = ActionSpace.from_config(cfg.market)
    sale = actions.sell(False, actions.moneyness.index(0.95), actions.expiries_days.index(30))
    always = lambda obs, state: (torch.full((obs.mask.shape[0],), sale, dtype=torch.long), state)  # noqa: E731
    results = {name: walk(name, always, None, data, "test", cfg, "cpu")
               for name, data in (("at_x1", sp500), ("at_x5", prices_times(sp500, 5.0)))}
    assert results["at_x5"].traded.sum() == 0 and results["at_x1"].traded.sum() > 0
    bars = len(results["at_x5"].dates) - 1
    assert results["at_x5"].masked[0] == bars
    notes = [line for line in format_report(results).splitlines() if line.startswith("note:")]
    assert notes == [f"note: at_x5 never traded: the mask turned the order it chose into hold on {bars} of {bars} "
                     "bars (no offered order fitted the account; docs/MARKET.md, 'Sizing')"]
    assert np.isfinite(results["at_x5"].equity).all()
