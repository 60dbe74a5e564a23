"""The batched env against the plain-Python reference env (tests/reference_env.py), step by step: the synthetic
market on three accounts, the S&P 500 with its stale opens, the sync-free step, hourly bars with short expiries."""
import dataclasses

import pytest
from env_trajectory import make_sync_free
from reference_agreement import (
    EXACT,
    INTRADAY_ACCOUNT,
    INTRADAY_MARKET,
    NOTIONAL_CAP,
    SELLS,
    SP500_MARGIN,
    SP500_STARTS,
    agree_with_reference,
    intraday_market,
)

from clstm_ppo.config import EnvConfig, MarketConfig

TIGHT = EnvConfig(dtype="float64", initial_cash=5_000.0, position_frac=0.2)
# A $20,000 account that puts up to half its equity into one sale's margin, and sells three times as often as it
# buys: sales sized by the cash room, then margin calls.
MARGIN = EnvConfig(dtype="float64", initial_cash=20_000.0, position_frac=0.5)


# Rich: cash never binds. Tight: a $5,000 account where the budget and the cash room decide most buys. Margin:
# shorts up to the cash room, called when the market moves against them.
@pytest.mark.parametrize("sizing", ["fractional", "whole"])
@pytest.mark.parametrize("env_cfg", [EXACT, TIGHT, MARGIN], ids=["rich", "tight", "margin"])
def test_the_batched_env_agrees_with_a_plain_python_reference_step_by_step(synthetic_data, env_cfg, sizing):
    """The synthetic market: a model implied vol, one flat rate, a dividend yield, no stale opens, a thin option
    market (the order cap binds often), index margin rates; fractional orders (the default) and whole ones."""
    checked = agree_with_reference(synthetic_data, MarketConfig(sizing=sizing), env_cfg,
                                   weights=SELLS if env_cfg is MARGIN else None)
    assert checked["steps"] == 48 * 120 and checked["closes"] > 1000, checked
    if sizing == "fractional":  # no order is refused for want of a whole contract
        assert checked["sales"] > 300 and checked["buys"] > 300 and checked["share_buys"] > 200, checked
    elif env_cfg is EXACT:
        assert checked["capped_buys"] > 100 and checked["expiries"] > 20, checked
        assert checked["sales"] > 500 and checked["buybacks"] > 500, checked
        assert checked["short_expiries_itm"] >= 10 and checked["short_expiries_otm"] >= 10, checked
        assert checked["covered_marks"] > 500 and checked["dividend_steps"] > 1000, checked
        assert checked["share_buys"] > 200 and checked["share_sales"] > 200, checked
        assert checked["room_bound_share_buys"] > 100 and checked["margin_calls"] > 20, checked
    elif env_cfg is TIGHT:
        assert checked["budget_bound"] > 200, checked  # the tight account really is limited by its cash
        assert checked["episodes"] > 10 and checked["expiries"] > 20, checked  # ruined: followed by fresh references
    else:
        assert checked["margin_calls"] > 200 and checked["margin_call_closes"] > 400, checked
        assert checked["room_bound_sales"] > 200 and checked["episodes"] > 20, checked


# The S&P 500 from 2005 into 2008: real VIX closes and opens (or the EWMA model), daily T-bill rates, and bars
# whose open is stale (a copy of the previous close) mixed with traded opens; index margin rates.
@pytest.mark.parametrize("iv_source, env_cfg, sizing", [
    ("auto", EXACT, "whole"), ("model", EnvConfig(dtype="float64", initial_cash=60_000.0, position_frac=0.1), "whole"),
    ("auto", SP500_MARGIN, "whole"), ("auto", NOTIONAL_CAP, "whole"),
    ("auto", SP500_MARGIN, "fractional"), ("auto", NOTIONAL_CAP, "fractional")],
    ids=["vix-rich", "model-tight", "vix-margin", "vix-notional-cap", "vix-margin-fractional",
         "vix-notional-cap-fractional"])
def test_the_batched_env_agrees_with_the_reference_on_the_sp500(sp500_data, iv_source, env_cfg, sizing):
    checked = agree_with_reference(sp500_data, MarketConfig(iv_source=iv_source, sizing=sizing), env_cfg,
                                   starts=SP500_STARTS,
                                   weights=SELLS if env_cfg in (SP500_MARGIN, NOTIONAL_CAP) else None)
    assert checked["steps"] == 48 * 120 and checked["closes"] > 500, checked
    assert checked["stale_fills"] > 500 and checked["open_fills"] > 500, checked
    assert checked["expiries"] > 0 and checked["early_expiries"] > 0, checked
    assert checked["share_buys"] > 200 and checked["dividend_steps"] > 1000, checked
    if sizing == "fractional":  # the cap cuts orders to fractions of a contract instead of refusing them
        assert checked["sales"] > 300 and checked["margin_calls"] > 50, checked
        if env_cfg is NOTIONAL_CAP:
            assert checked["notional_bound"] > 100 and checked["notional_masked"] == 0, checked
        return
    if env_cfg is EXACT:
        assert checked["sales"] > 500 and checked["buybacks"] > 500 and checked["covered_marks"] > 300, checked
        assert checked["short_expiries_itm"] >= 3 and checked["short_expiries_otm"] >= 3, checked
        assert checked["margin_calls"] > 10, checked
    elif env_cfg is SP500_MARGIN:
        assert checked["margin_calls"] > 100 and checked["margin_call_closes"] > 200, checked
        assert checked["room_bound_sales"] > 100, checked
    elif env_cfg is NOTIONAL_CAP:
        assert checked["notional_bound"] > 100 and checked["notional_masked"] > 100, checked
        assert checked["covered_past_cap"] > 20, checked
        assert checked["buys"] > 100 and checked["sales"] > 100, checked
    if env_cfg is not NOTIONAL_CAP:
        assert checked["notional_bound"] == checked["notional_masked"] == checked["covered_past_cap"] == 0, checked


def test_the_sync_free_step_agrees_with_the_reference_too(synthetic_data, sp500_data):
    """The step compiled code and GPUs run (every copy priced at a close, no host sync), run eagerly, against the
    reference on a rich synthetic account and on the S&P 500 under margin calls: the same checks as the eager env's
    (tests/test_functional_step.py holds the two paths to each other over longer trajectories)."""
    checked = agree_with_reference(synthetic_data, MarketConfig(sizing="whole"), EXACT, make_env=make_sync_free)
    assert checked["steps"] == 48 * 120 and checked["expiries"] > 20 and checked["buybacks"] > 500, checked
    checked = agree_with_reference(sp500_data, MarketConfig(), SP500_MARGIN, starts=SP500_STARTS, weights=SELLS,
                                   make_env=make_sync_free)
    assert checked["margin_calls"] > 100 and checked["stale_fills"] > 500, checked


def test_the_batched_env_agrees_with_the_reference_on_intraday_bars_and_short_expiries():
    """Hourly bars open at the previous bar's close (stale at a session's first bar); 1- and 3-day options, often
    listed for a weekend day or for the data's hole, expire at the last session's 16:00 close before it, some on
    the bar that buys them; short maturities reach the vol surface's wings."""
    checked = agree_with_reference(intraday_market(), dataclasses.replace(INTRADAY_MARKET, sizing="whole"),
                                   INTRADAY_ACCOUNT)
    assert checked["stale_fills"] > 100 and checked["open_fills"] > 2000 and checked["episodes"] > 20, checked
    assert checked["expiries"] > 200 and checked["early_expiries"] > 50 and checked["capped_buys"] > 20, checked
    assert checked["budget_bound"] > 100 and checked["same_bar_buys"] > 0 and checked["expiry_sales"] > 0, checked
    assert checked["sales"] > 300 and checked["short_expiries_itm"] >= 20 and checked["short_expiries_otm"] >= 20, \
        checked
    assert checked["covered_marks"] > 100 and checked["margin_calls"] >= 5, checked
