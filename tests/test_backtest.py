"""The continuous walk and its benchmarks: every bar once, buy-and-hold is the index, cash is flat, the MACD
rule trades its crosses."""
import dataclasses

import numpy as np
import pytest
import torch
from market_fixtures import handmade_market, recording

from clstm_ppo.backtest.policies import cash_policy, long_straddle, macd_rule, random_policy
from clstm_ppo.backtest.walk import buy_and_hold, walk, walk_env
from clstm_ppo.config import Config, DataConfig, EnvConfig, SyntheticConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.env import ActionSpace


@pytest.fixture(scope="module")
def two_underlyings():
    return build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=900, n_underlyings=2)))


@pytest.mark.parametrize("split", ["validation", "test"])
def test_the_walk_visits_every_bar_of_the_split_once_per_underlying(two_underlyings, split):
    data, cfg = two_underlyings, Config()
    seen = []
    result = walk("random", *recording(*random_policy(0), seen), data, split, cfg, "cpu")
    start, end = data.splits[split]
    assert list(result.dates) == list(data.dates[start:end]), "from the split's first bar to its last"
    assert result.equity.shape == (2, end - start) and result.symbols == data.symbols
    rows = torch.stack([row for row, _ in seen])  # (decisions, copies): a decision at every bar but the last
    n_bars = len(data.dates)
    for s in range(2):
        assert rows[:, s].tolist() == [s * n_bars + t for t in range(start, end - 1)]
    assert (result.equity[:, 0] == cfg.env.initial_cash).all()
    assert result.closed.sum() > 0 and result.traded.sum() > 0 and (result.costs >= 0).all()


def test_a_walk_can_start_before_its_window_fits_inside_the_split(two_underlyings):
    """The validation walk's first windows reach back into training bars: they are past, and allowed."""
    data = two_underlyings
    env = walk_env(data, "validation", Config(), "cpu")
    assert env.first_bar == data.splits["validation"][0] and data.window > 1


def test_cash_grows_at_the_rate_series_and_buy_and_hold_is_the_underlying_with_its_dividends(two_underlyings):
    data = two_underlyings
    cfg = Config(env=EnvConfig(dtype="float64"))
    cash = walk("cash", *cash_policy(), data, "test", cfg, "cpu")
    start, end = data.splits["test"]
    days = np.diff(data.dates[start:end].values).astype("timedelta64[s]").astype(float) / 86400
    growth = np.exp(cash.rate[:, :-1] * days / 365)  # each bar's rate, over the calendar days to the next close
    np.testing.assert_allclose(cash.equity[:, 1:] / cash.equity[:, :-1], growth, rtol=1e-12)
    assert cash.closed.sum() == 0 and cash.costs.sum() == 0
    held = buy_and_hold(data, "test", cfg)
    bars = data.bars
    fill = np.where(np.isclose(bars["open"][:, start + 1], bars["close"][:, start], rtol=1e-6, atol=0),
                    bars["close"][:, start + 1], bars["open"][:, start + 1])  # the first fill: next bar's open
    cost = cfg.market.costs.share_cost_bps * 1e-4
    shares = cfg.env.initial_cash * (1 - cost) / fill
    # Price return less the cost, plus the dividends (1.5% a year on the price index) and interest in cash.
    price_only = shares * bars["close"][:, end - 1]
    extra = held.equity[:, -1] - price_only
    years = days.sum() / 365
    assert ((extra > 0) & (extra < price_only * (0.015 + 0.08) * years)).all(), extra
    no_dividends = buy_and_hold(data, "test", dataclasses.replace(
        cfg, market=dataclasses.replace(cfg.market, dividend_yield=0.0)))
    # Without dividends: the shares, plus the first bar's carry on the account, compounding at the rates.
    growth = np.exp(no_dividends.rate[:, :-1] * days / 365)
    leftover = cfg.env.initial_cash * (growth[:, 0] - 1)
    for i in range(1, no_dividends.equity.shape[1]):
        if i > 1:
            leftover = leftover * growth[:, i - 1]
        np.testing.assert_allclose(no_dividends.equity[:, i], shares * bars["close"][:, start + i] + leftover,
                                   rtol=1e-12)


def test_the_macd_rule_buys_a_call_on_an_up_cross_and_reverses_into_a_put_on_the_down_cross():
    n = 60
    data = handmade_market(100 + np.arange(n) * 0.1)
    macd = np.full(n, -1.0)
    macd[10:20] = 1.0  # up-cross at bar 10, down-cross at bar 20
    data.raw_features[0, :, data.feature_names.index("macd")] = macd
    data = dataclasses.replace(data, splits={"train": (0, n), "validation": (0, n), "test": (0, n)})
    cfg = Config(env=EnvConfig(dtype="float64"))
    actions = ActionSpace.from_config(cfg.market)
    seen = []
    result = walk("macd_rule", *recording(*macd_rule(data, actions, cfg.env.max_positions), seen), data, "test",
                  cfg, "cpu")
    by_bar = {int(row[0]): int(action[0]) for row, action in seen}
    m, e = actions.moneyness.index(1.0), actions.expiries_days.index(30)
    assert by_bar[10] == actions.buy(True, m, e), "an up-cross buys a 30-day at-the-money call"
    assert by_bar[20] == actions.close_all, "the down-cross closes it ..."
    assert by_bar[21] == actions.buy(False, m, e), "... and buys the put on the next bar"
    assert {a for t, a in by_bar.items() if t not in (10, 20, 21)} == {actions.hold}
    assert result.closed[0] == 2 and result.open_at_end[0] == 0, "the call closed at the cross, the put expired"


def test_the_long_straddle_buys_a_call_then_a_put_and_rolls_when_both_expire():
    n = 90
    data = handmade_market(100 + np.sin(np.arange(n) / 5.0))
    cfg = Config(env=EnvConfig(dtype="float64"))
    actions = ActionSpace.from_config(cfg.market)
    seen = []
    result = walk("long_straddle", *recording(*long_straddle(actions, cfg.env.max_positions), seen), data, "test",
                  cfg, "cpu")
    chosen = [int(action[0]) for _, action in seen]
    m, e = actions.moneyness.index(1.0), actions.expiries_days.index(30)
    call, put = actions.buy(True, m, e), actions.buy(False, m, e)
    assert chosen[:3] == [call, put, actions.hold]
    buys = [i for i, a in enumerate(chosen) if a in (call, put)]
    assert len(buys) >= 4 and chosen[buys[2]] == call, "rolled into a new straddle after the expiry"
    assert result.closed[0] >= 2


def test_an_account_ruined_by_short_puts_stops_and_the_walk_still_covers_every_bar():
    n = 70
    data = handmade_market(np.concatenate([np.full(40, 100.0), np.full(n - 40, 20.0)]))  # an 80% crash at bar 40
    cfg = Config(env=EnvConfig(dtype="float64", initial_cash=20_000.0, position_frac=1.0))
    actions = ActionSpace.from_config(cfg.market)
    put = actions.sell(False, actions.moneyness.index(1.0), actions.expiries_days.index(30))

    def sell_puts(obs, state):
        return torch.where(obs.mask[:, put], put, actions.hold), state
    result = walk("short_puts", sell_puts, None, data, "test", cfg, "cpu")
    assert result.equity.shape == (1, len(result.dates)) and len(result.dates) == n - data.window + 1
    ruined = int(np.argmax(result.equity[0] < 0))
    assert ruined > 0, "the crash takes the account below zero"
    assert (result.equity[0, ruined:] == result.equity[0, ruined]).all(), "a ruined account stops trading"


@pytest.mark.parametrize("market", ["two underlyings", "a crash"])
def test_policies_walked_together_each_get_the_walk_they_get_alone(two_underlyings, market):
    """evaluate walks its rule benchmarks in one env (copies p*S..p*S+S-1 for the p-th); every number of each
    must equal its own walk's bit for bit, a ruined account's included: no copy may see another's actions."""
    from clstm_ppo.backtest.walk import walk_together

    crash = np.concatenate([np.full(60, 100.0), np.full(40, 20.0)])  # an 80% fall at bar 60
    data = two_underlyings if market == "two underlyings" else handmade_market(crash)
    cfg = Config(env=EnvConfig(initial_cash=20_000.0, position_frac=1.0))  # small accounts: short puts can ruin
    actions = ActionSpace.from_config(cfg.market)
    put = actions.sell(False, actions.moneyness.index(1.0), actions.expiries_days.index(30))

    def sell_puts(obs, state):
        return torch.where(obs.mask[:, put], put, actions.hold), state

    def rules():  # fresh carried states each time: a rule's state is its own walk's
        return {"cash": cash_policy(), "random": random_policy(7), "short_puts": (sell_puts, None),
                "macd_rule": macd_rule(data, actions, cfg.env.max_positions),
                "long_straddle": long_straddle(actions, cfg.env.max_positions)}
    together = walk_together(rules(), data, "test", cfg, "cpu")
    assert list(together) == list(rules())
    for name, (policy, state) in rules().items():
        alone = walk(name, policy, state, data, "test", cfg, "cpu")
        for field in dataclasses.fields(alone):
            assert np.array_equal(getattr(alone, field.name), getattr(together[name], field.name)), (name, field.name)
    assert together["random"].closed.sum() > 0 and together["long_straddle"].closed.sum() > 0
    assert not np.array_equal(together["random"].equity, together["cash"].equity)
    if market == "a crash":
        assert together["short_puts"].equity.min() < 0 < together["cash"].equity.min(), "one account ruined"
