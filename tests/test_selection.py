"""Model selection: best scores per metric, the patience count, and the smoothed composite that picks the end of
a good stretch of validation walks rather than one lucky walk."""
import math

import pytest

from clstm_ppo.run_files.checkpoint import BEST_METRICS
from clstm_ppo.training.selection import Selection


def walk(composite: float) -> dict[str, float]:
    return {"composite": composite, "win_rate": 0.5, "profit_rate": 1.0, "sharpe": 1.0}


def test_the_smoothed_composite_is_the_mean_of_the_last_window_of_walks():
    s = Selection(window=3)
    picks = []
    for value in (0.9, 0.2, 0.3, 0.6, 0.7, 0.65):  # one lucky walk, then a good stretch
        m = walk(value)
        picks.append(s.record(m))
        full = len(s.recent) == 3
        assert (m["composite_smoothed"] == pytest.approx(sum(s.recent) / 3)) if full else math.isnan(
            m["composite_smoothed"]), "defined once the window is full"
    assert s.best["composite"] == 0.9 and "composite" in picks[0]  # the single best pick: the lucky first walk
    assert s.best["composite_smoothed"] == pytest.approx((0.6 + 0.7 + 0.65) / 3)
    assert "composite_smoothed" in picks[-1]  # the smoothed pick: the end of the good stretch
    assert s.evals_without_best == 5 and "composite_smoothed" in BEST_METRICS


def test_selection_resumes_with_its_window_of_recent_walks():
    a = Selection(window=2)
    for value in (0.4, 0.5):
        a.record(walk(value))
    b = Selection(window=2)
    b.load_state_dict(a.state_dict())
    m_a, m_b = walk(0.9), walk(0.9)
    assert a.record(m_a) == b.record(m_b) and m_a["composite_smoothed"] == m_b["composite_smoothed"] == 0.7
    old = {"best": {"composite": 0.5}}  # a checkpoint from before the smoothed composite: starts its window afresh
    c = Selection()
    c.load_state_dict(old)
    assert c.recent == [] and c.best == {"composite": 0.5}
