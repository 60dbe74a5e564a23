"""best_rule: the fixed rules made of the agent's own actions, walked as one policy, and the pick among them on
the validation split (clstm_ppo/backtest/rules.py)."""
import dataclasses

import numpy as np
import pytest
import torch
from market_fixtures import recording

from clstm_ppo.backtest.policies import OPEN_SHARE
from clstm_ppo.backtest.rules import PICK_METRICS, STOCK_SHARE, FixedRule, pick_rule, rule_family, rules_policy
from clstm_ppo.backtest.walk import walk, walk_batched
from clstm_ppo.config import Config, DataConfig, EnvConfig, SyntheticConfig
from clstm_ppo.data import build_market_data
from clstm_ppo.env import ActionSpace

CFG = Config(env=EnvConfig(initial_cash=50_000.0))
ACTIONS = ActionSpace.from_config(CFG.market)
SLOTS = CFG.env.max_positions
M105, M095, D30 = ACTIONS.moneyness.index(1.05), ACTIONS.moneyness.index(0.95), ACTIONS.expiries_days.index(30)
SELL_CALL, SELL_PUT = ACTIONS.sell(True, M105, D30), ACTIONS.sell(False, M095, D30)
FULL = ACTIONS.stock_targets.index(1.0)
RULES = [FixedRule(None, SELL_CALL, True), FixedRule(None, SELL_CALL, False), FixedRule(FULL, SELL_CALL, False),
         FixedRule(None, SELL_PUT, True), FixedRule(None, None)]


@pytest.fixture(scope="module")
def market():
    return build_market_data(DataConfig(source="synthetic", synthetic=SyntheticConfig(n_bars=900, n_underlyings=2)))


def reference_rule(rule: FixedRule):
    """The rule as a plain loop over copies: buy the stock target while none is held and the mask allows it, else
    the option order where the mask allows it (one at a time: only with no option open), else hold."""
    def act(obs, state):
        out = []
        for i in range(obs.mask.shape[0]):
            valid = obs.mask[i].tolist()
            open_now = round(float(obs.portfolio[i, OPEN_SHARE]) * SLOTS)
            if rule.stock is not None and obs.portfolio[i, STOCK_SHARE] <= 0 and valid[ACTIONS.stock(rule.stock)]:
                out.append(ACTIONS.stock(rule.stock))
            elif rule.order is not None and valid[rule.order] and (rule.every_slot or open_now == 0):
                out.append(rule.order)
            else:
                out.append(ACTIONS.hold)
        return torch.tensor(out), state
    return act, None


def same_walk(a, b) -> bool:
    fields = [f.name for f in dataclasses.fields(a) if f.name != "policy"]
    return all(np.array_equal(getattr(a, name), getattr(b, name)) for name in fields)


def test_the_family_is_every_stock_target_times_every_option_order_placed_two_ways():
    family = rule_family(ACTIONS)
    holding = [t for t in ACTIONS.stock_targets if t > 0]  # a 0% target is the same as no shares
    assert len(family) == (1 + len(holding)) * (1 + 2 * ACTIONS.option_orders) == 147
    names = [rule.describe(ACTIONS) for rule in family]
    assert len(set(names)) == len(names) and names[0] == "hold cash"
    assert "sell call 1.05 x 30d, every free slot" in names  # the S&P 500 agents' most common walk
    assert "underlying to 100% + sell call 1.05 x 30d, one at a time" in names  # a 5% OTM buy-write


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.describe(ACTIONS))
def test_a_rule_walks_as_its_plain_per_copy_loop(market, rule):
    vectorised = walk("rule", *rules_policy([rule], ACTIONS, len(market.symbols), SLOTS, "cpu"), market, "test", CFG,
                      "cpu")
    assert same_walk(vectorised, walk("rule", *reference_rule(rule), market, "test", CFG, "cpu"))


def test_every_free_slot_fills_the_book_one_at_a_time_holds_one_and_the_shares_stay(market):
    seen = {}
    for rule in RULES[:3]:
        seen[rule] = []
        policy = recording(*rules_policy([rule], ACTIONS, 2, SLOTS, "cpu"), seen[rule], "portfolio")
        walk("rule", *policy, market, "test", CFG, "cpu")
    open_counts = {rule: np.array([(p[:, OPEN_SHARE] * SLOTS).round().numpy() for p, _ in obs])
                   for rule, obs in seen.items()}
    assert open_counts[RULES[0]].max() == SLOTS, "calls sold into every free slot fill the book"
    assert open_counts[RULES[1]].max() == 1 and (open_counts[RULES[1]] == 1).mean() > 0.5, "one call at a time, rolled"
    shares = np.array([p[:, STOCK_SHARE].numpy() for p, _ in seen[RULES[2]]])
    first_actions = seen[RULES[2]][0][1]
    assert (first_actions == ACTIONS.stock(FULL)).all(), "the shares are bought at the first decision"
    assert (shares[1:] > 0.5).all(), "and held to the end (calls written against them, not sold)"


def test_the_family_walked_as_one_policy_gives_each_rule_its_own_walk(market):
    names = [rule.describe(ACTIONS) for rule in RULES]
    together = walk_batched(names, *rules_policy(RULES, ACTIONS, len(market.symbols), SLOTS, "cpu"), market,
                            "validation", CFG, "cpu")
    for rule, name in zip(RULES, names, strict=True):
        alone = walk(name, *rules_policy([rule], ACTIONS, len(market.symbols), SLOTS, "cpu"), market, "validation",
                     CFG, "cpu")
        assert same_walk(alone, together[name]), name
    assert len({together[n].equity.tobytes() for n in names}) == len(names), "five rules, five different walks"


def sharpe_over_bill(result, s: int) -> float:
    """Annualised Sharpe of underlying s's daily returns over the T-bill, straight from the equity and rate (0 for
    an account that only earned the bill: its excess is rounding noise)."""
    r = np.diff(result.equity[s]) / result.equity[s, :-1]
    days = np.diff(result.dates.values).astype("timedelta64[D]").astype(float)
    excess = r - (np.exp(result.rate[s, :-1] * days / 365.0) - 1.0)
    std = excess.std(ddof=1)
    return float(excess.mean() / std * np.sqrt(252)) if std > 1e-12 else 0.0


def test_the_pick_is_the_best_validation_sharpe_of_the_family_and_reads_no_later_bar(market):
    pick = pick_rule(market, CFG, "cpu")
    family = rule_family(ACTIONS)
    assert pick.tried == len(family) and pick.metric == "sharpe_excess"
    names = [rule.describe(ACTIONS) for rule in family]
    walks = walk_batched(names, *rules_policy(family, ACTIONS, 2, SLOTS, "cpu"), market, "validation", CFG, "cpu")
    scores = {n: np.mean([sharpe_over_bill(walks[n], s) for s in (0, 1)]) for n in names}
    best = max(scores, key=scores.get)
    assert pick.name == best and pick.rule == family[names.index(best)]
    assert pick.score == pytest.approx(scores[best], rel=1e-9)
    assert [row["rule"] for row in pick.best][0] == best and len(pick.best) == 5
    assert [row["sharpe_excess"] for row in pick.best] == sorted((row["sharpe_excess"] for row in pick.best),
                                                                reverse=True)
    start, end = market.split_dates("validation")
    assert pick.walked == f"{start.date()}..{end.date()}"
    # Change every bar of the test split (prices and vols): the pick and every score stay; change the validation
    # years and they move.
    test_from = market.splits["test"][0]
    later = {k: v.copy() for k, v in market.bars.items()}
    for key in ("open", "high", "low", "close"):
        later[key][:, test_from:] *= 1.3
    later["iv"][:, test_from:] *= 2.0
    again = pick_rule(dataclasses.replace(market, bars=later), CFG, "cpu")
    assert (again.name, again.best) == (pick.name, pick.best)
    val_from, val_to = market.splits["validation"]
    earlier = {k: v.copy() for k, v in market.bars.items()}
    for key in ("open", "high", "low", "close"):
        earlier[key][:, (val_from + val_to) // 2:val_to] *= 0.8
    assert pick_rule(dataclasses.replace(market, bars=earlier), CFG, "cpu").best != pick.best


@pytest.mark.parametrize("metric", PICK_METRICS)
def test_no_allowed_metric_picks_a_rule_for_earning_only_the_bill(market, metric):
    """Over 0, cash's Sharpe, Sortino and Calmar are huge (its returns vary only with the rate); the metrics a
    rule may be picked by rank it by what it earns, so a rule that beats the bill beats it."""
    pick = pick_rule(market, CFG, "cpu", metric=metric)
    assert pick.name != "hold cash" and pick.score > 0


def test_a_rule_is_picked_only_by_a_metric_where_higher_is_better(market):
    for wrong in ("max_drawdown", "sharpe", "calmar"):
        with pytest.raises(ValueError, match=f"picked by one of sharpe_excess, .*not '{wrong}'"):
            pick_rule(market, CFG, "cpu", metric=wrong)
