"""The metrics of docs/BACKTEST.md against hand-computed values, and the all-reducible training sums against them."""
import math

import numpy as np
import pytest

from clstm_ppo.env.episodes import ragged
from clstm_ppo.market import COST_KINDS
from clstm_ppo.metrics import (
    COST_FIELDS,
    composite_score,
    concat_episodes,
    episode_metrics,
    episode_sums,
    max_drawdown,
    sharpe,
    sums_to_metrics,
)


def three_episodes() -> dict[str, np.ndarray]:
    curves = [np.array([100.0, 110.0, 99.0, 121.0]), np.array([100.0, 90.0, 95.0]), np.array([100.0, 100.0])]
    return {
        "reward": np.array([2.1, -0.5, 0.0]),
        "return": np.array([21.0, -5.0, 0.0]),
        "return_pct": np.array([21.0, -5.0, 0.0]),
        "closed": np.array([4.0, 2.0, 0.0]),
        "wins": np.array([3.0, 0.0, 0.0]),
        "open": np.array([1.0, 0.0, 0.0]),
        "steps": np.array([3.0, 2.0, 1.0]),
        "costs": np.array([np.arange(len(COST_KINDS)) + 1.0, np.full(len(COST_KINDS), 0.5), np.zeros(len(COST_KINDS))]),
        "equity_curve": ragged(curves),
    }


def test_sharpe_and_drawdown_match_hand_computed_values():
    r = np.array([0.10, -0.10, 22.0 / 99.0])  # 100 -> 110 -> 99 -> 121
    mean, std = r.sum() / 3, math.sqrt(((r - r.sum() / 3) ** 2).sum() / 2)
    assert sharpe(r, 252) == pytest.approx(math.sqrt(252) * mean / std)
    assert sharpe(r, 35_040) == pytest.approx(math.sqrt(35_040) * mean / std)  # 15-minute bars, 24/7
    assert sharpe(np.zeros(5), 252) == 0.0 and sharpe(np.array([0.01]), 252) == 0.0  # flat or single: no Sharpe
    assert max_drawdown(np.array([100.0, 110.0, 99.0, 121.0, 60.5])) == pytest.approx(0.5)  # 121 -> 60.5


def test_pooled_metrics_of_three_episodes():
    m = episode_metrics(three_episodes(), 252)
    assert m["win_rate"] == pytest.approx(3 / 6)  # trades pooled over episodes, not averaged per episode
    assert m["profit_rate"] == pytest.approx(1 / 3)  # the flat episode is not profitable
    assert m["return_pct"] == pytest.approx(16 / 3)
    assert m["composite"] == pytest.approx((0.5 + 1 / 3 + (16 / 3 + 20) / 40) / 3)
    assert composite_score(0.0, 0.0, 0.0) == pytest.approx(1 / 6)  # hold: no trades, flat equity
    assert composite_score(1.0, 1.0, 500.0) == 1.0 and composite_score(0.0, 0.0, -90.0) == 0.0  # clipped
    assert m["cost_spread"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert m["costs"] == pytest.approx(sum(m[k] for k in COST_FIELDS))


def test_training_sums_give_the_same_metrics_however_the_episodes_are_split_across_ranks():
    eps = three_episodes()
    whole = episode_metrics(eps, 252)
    halves = [{k: v[:2] for k, v in eps.items()}, {k: v[2:] for k, v in eps.items()}]
    summed = sum(episode_sums(h) for h in halves)  # what the all-reduce over two ranks computes
    np.testing.assert_allclose(summed, episode_sums(eps))
    from_sums = sums_to_metrics(summed)
    for key in ("reward", "return", "return_pct", "closed", "open", "steps", "win_rate", "profit_rate", "composite",
                "costs", *COST_FIELDS):
        assert from_sums[key] == pytest.approx(whole[key]), key
    assert sums_to_metrics(episode_sums({}))["episodes"] == 0.0
    assert concat_episodes([halves[0], None, halves[1]])["return"].tolist() == eps["return"].tolist()
