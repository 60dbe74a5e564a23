"""Returns that depend neither on the price level nor on the account's size (docs/MARKET.md, "Sizing").

Every price x k (and the market's dollar conventions with it: the strike step, quote ticks, the cheap-option
threshold and the fees per contract; the share volume / k, as after a k-to-1 reverse split), or the initial cash x k
(with the per-order commission minimum, and a market k times as deep): every fixed rule of the best_rule family and
an untrained agent's greedy walk earn the same return on every bar, to 1e-9, under fractional sizing (the default).
Under whole contracts they do not: the sizes, and which orders fit at all, move with the level.
"""
import dataclasses

import numpy as np
import pytest
import torch

from clstm_ppo.agent.model import ActorCritic
from clstm_ppo.backtest.policies import agent_policy
from clstm_ppo.backtest.rules import walk_family
from clstm_ppo.backtest.walk import walk
from clstm_ppo.config import AgentConfig, Config, MarketConfig
from clstm_ppo.data import MarketData
from clstm_ppo.env import PORTFOLIO_FEATURES, ActionSpace
from clstm_ppo.market.observed import observed_market_data

K = (0.1, 0.5, 2.0, 5.0, 10.0)
STRIKE_STEP = 5.0  # the S&P 500's listed step at x1; x k at k times the prices
PRICES = ("open", "high", "low", "close")
PER_CONTRACT = ("commission_per_contract", "occ_clearing_per_contract", "finra_taf_per_contract", "orf_per_contract")
BARS = 260  # a year of the validation split: enough expiries, margin calls and rolls


@pytest.fixture(scope="module")
def sp500():
    """The embedded S&P 500 (VIX, T-bill) as the default agent observes it (the option features in), its
    validation split cut to its first year."""
    data = observed_market_data(Config())
    start, _ = data.splits["validation"]
    return dataclasses.replace(data, splits={**data.splits, "validation": (start, start + BARS)})


def base_config(sizing: str = "fractional") -> Config:
    cfg = Config()
    cfg.market = dataclasses.replace(cfg.market, strike_step=STRIKE_STEP, sizing=sizing)
    return cfg


def prices_times(data: MarketData, k: float) -> MarketData:
    """Every price x k, the share volume / k: the same dollar volume (the features, made from returns, stay)."""
    bars = {**data.bars, **{name: data.bars[name] * k for name in PRICES}}
    if "volume" in bars:
        bars["volume"] = data.bars["volume"] / k
    return dataclasses.replace(data, bars=bars)


def market_at_prices_times(market: MarketConfig, k: float) -> MarketConfig:
    """The market's conventions in dollars a share or a contract x k; the per-order minimum and the volume floor
    (in contracts: / k) as a market whose contracts are worth k times as much has them."""
    c = market.costs
    costs = dataclasses.replace(c, **{name: getattr(c, name) * k for name in PER_CONTRACT},
                                index_ticks=[x * k for x in c.index_ticks], stock_ticks=[x * k for x in c.stock_ticks],
                                tick_break=c.tick_break * k, spread_cheap_price=c.spread_cheap_price * k,
                                min_option_volume=c.min_option_volume / k)
    return dataclasses.replace(market, strike_step=market.strike_step * k, costs=costs)


def account_times(data: MarketData, cfg: Config, k: float) -> tuple[MarketData, Config]:
    """The initial cash x k, the per-order commission minimum with it, in a market k times as deep (its volume and
    volume floor x k), so an order takes the same share of a strike's volume."""
    c = cfg.market.costs
    costs = dataclasses.replace(c, commission_min_per_order=c.commission_min_per_order * k,
                                min_option_volume=c.min_option_volume * k)
    scaled = dataclasses.replace(cfg, market=dataclasses.replace(cfg.market, costs=costs),
                                 env=dataclasses.replace(cfg.env, initial_cash=cfg.env.initial_cash * k))
    bars = {**data.bars, "volume": data.bars["volume"] * k}
    return dataclasses.replace(data, bars=bars), scaled


def scaled(data: MarketData, cfg: Config, what: str, k: float) -> tuple[MarketData, Config]:
    if what == "prices":
        return prices_times(data, k), dataclasses.replace(cfg, market=market_at_prices_times(cfg.market, k))
    return account_times(data, cfg, k)


def family_returns(data: MarketData, cfg: Config) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    walks = walk_family(data, "validation", cfg, "cpu")
    return ({name: w.daily_returns for name, w in walks.items()},
            {name: float(w.closed.sum() + w.open_at_end.sum()) for name, w in walks.items()})


@pytest.fixture(scope="module")
def family_at_one(sp500):
    return family_returns(sp500, base_config())


@pytest.mark.parametrize("what", ["prices", "cash"])
def test_every_fixed_rule_earns_the_same_returns_at_any_price_level_and_account_size(sp500, family_at_one, what):
    base, positions = family_at_one
    sales = [name for name in base if "sell put" in name]
    assert len(base) > 100 and all(positions[name] > 5 for name in sales), "the rules really trade"
    assert np.std(np.concatenate(list(base.values()))) > 1e-3
    for k in K:
        returns, _ = family_returns(*scaled(sp500, base_config(), what, k))
        assert list(returns) == list(base)
        worst = max(float(np.abs(returns[name] - base[name]).max()) for name in base)
        assert worst < 1e-9, f"{what} x {k}: a rule's daily return moved by {worst:.2e}"


def test_whole_contracts_are_not_scale_free(sp500):
    """The same check fails for the market before fractional sizing: at 5 times the prices the 0.95 put's margin
    no longer fits position_frac of $1M, and whole-contract rounding moves every other order's size."""
    base, _ = family_returns(sp500, base_config("whole"))
    returns, positions = family_returns(*scaled(sp500, base_config("whole"), "prices", 5.0))
    sale = next(name for name in base if name.startswith("sell put 0.95 x 30d"))
    assert positions[sale] == 0, "masked on every bar: no position"
    worst = max(float(np.abs(returns[name] - base[name]).max()) for name in base)
    assert worst > 1e-3


def untrained_agent(data: MarketData, cfg: Config) -> ActorCritic:
    torch.manual_seed(7)
    model = ActorCritic(len(data.feature_names), len(PORTFOLIO_FEATURES),
                        ActionSpace.from_config(cfg.market).n,
                        AgentConfig(lstm1_hidden=16, mlp_hidden=16, lstm2_hidden=16))
    return model.eval()


@pytest.mark.parametrize("what", ["prices", "cash"])
def test_an_agents_greedy_walk_is_the_same_at_any_price_level_and_account_size(sp500, what):
    """The portfolio features are shares of equity and the market features come from returns: the agent sees the
    same inputs, takes the same actions and earns the same returns."""
    cfg = base_config()
    model = untrained_agent(sp500, cfg)
    n = len(sp500.symbols)
    base = walk("agent", *agent_policy(model, n, torch.device("cpu")), sp500, "validation", cfg, "cpu")
    assert base.closed.sum() + base.open_at_end.sum() > 0 and base.traded.sum() > 0, "the agent really trades"
    for k in (0.1, 5.0, 10.0):
        data, scaled_cfg = scaled(sp500, cfg, what, k)
        result = walk("agent", *agent_policy(model, n, torch.device("cpu")), data, "validation", scaled_cfg, "cpu")
        np.testing.assert_allclose(result.daily_returns, base.daily_returns, rtol=0, atol=1e-9,
                                   err_msg=f"{what} x {k}")
        assert result.closed.tolist() == base.closed.tolist()


def test_the_features_of_a_file_at_five_times_the_prices_are_the_same(tmp_path):
    """The bar features and the model implied vol's features are made from returns: a file whose prices are x 5
    (its volume / 5) gives the agent the same inputs (docs/DATA.md)."""
    import pandas as pd

    frame = pd.read_csv("clstm_ppo/data/embedded/sp500_daily_1999_2018.csv.gz").drop(columns=["Adj Close"])
    datas = []
    for k in (1.0, 5.0):
        scaled_frame = frame.assign(**{c: frame[c] * k for c in ("Open", "High", "Low", "Close")},
                                    Volume=frame["Volume"] / k)
        path = tmp_path / f"x{k:g}.csv"
        scaled_frame.to_csv(path, index=False)
        cfg = Config()
        cfg.data = dataclasses.replace(cfg.data, source=str(path), train_end="2012-12-31", val_end="2015-12-31")
        datas.append(observed_market_data(cfg))
    one, five = datas
    assert one.feature_names == five.feature_names and "iv_zscore" in one.feature_names
    np.testing.assert_allclose(five.features, one.features, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(five.raw_features, one.raw_features, rtol=1e-8, atol=1e-8)  # the CSV round trip



def rule_walk(data: MarketData, cfg: Config, order: int) -> tuple:
    from clstm_ppo.backtest.rules import FixedRule, rules_policy

    actions = ActionSpace.from_config(cfg.market)
    policy = rules_policy([FixedRule(None, order)], actions, len(data.symbols), cfg.env.max_positions, "cpu")
    return walk("rule", *policy, data, "test", cfg, "cpu")


def test_the_sp500_at_five_times_its_prices_trades_as_it_does_at_its_own(sp500):
    """The regression of the whole-contract market: on the embedded S&P 500 x 5 (every open, high, low and close;
    the default settings, fees per contract and dollar ticks included) the 0.95 x 30-day put sold into every free
    slot was masked on every bar. Now it holds the same positions and earns what it earns at x 1, but for the fees
    per contract (a fifth as many contracts pay a fifth of them), the dollar quote grid and the strike step."""
    actions = ActionSpace.from_config(Config().market)
    sale = actions.sell(False, actions.moneyness.index(0.95), actions.expiries_days.index(30))
    walks = {}
    for sizing in ("fractional", "whole"):
        cfg = Config()
        cfg.market = dataclasses.replace(cfg.market, sizing=sizing)
        walks[sizing] = [rule_walk(data, cfg, sale) for data in (sp500, prices_times(sp500, 5.0))]
    one, five = walks["fractional"]
    positions = lambda w: float(w.closed.sum() + w.open_at_end.sum())  # noqa: E731
    assert positions(one) > 50 and positions(five) == positions(one)
    total = lambda w: float(w.equity[0, -1] / w.equity[0, 0] - 1)  # noqa: E731
    assert total(five) == pytest.approx(total(one), abs=0.005), (total(one), total(five))
    assert np.corrcoef(one.daily_returns[0], five.daily_returns[0])[0, 1] > 0.999
    whole_one, whole_five = walks["whole"]
    assert positions(whole_one) > 50 and positions(whole_five) == 0, "whole contracts: no sale fits at x 5"


def test_runs_saved_before_the_setting_walk_under_fractional_sizing():
    """A checkpoint's settings without market.sizing take the default (fractional), as decided for this change:
    an old agent walks the scale-free market; --set market.sizing=whole repeats the market it was trained in."""
    from clstm_ppo.config import load_config, to_dict

    saved = to_dict(Config())
    del saved["market"]["sizing"]
    assert load_config(None, [], base=saved).market.sizing == "fractional"
    assert load_config(None, ["market.sizing=whole"], base=saved).market.sizing == "whole"
    with pytest.raises(Exception, match="sizing"):
        load_config(None, ["market.sizing=half"])
