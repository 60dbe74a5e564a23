"""ppo.credit position: each option's P&L is paid to the step that opened it (clstm_ppo/agent/storage.py's
position_credit, the env's slot P&L in clstm_ppo/env/step.py and accounting.py)."""
import numpy as np
import pytest
import torch
from env_trajectory import random_valid

from clstm_ppo.agent.storage import position_credit
from clstm_ppo.config import ConfigError, load_config
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.env.accounting import tbill_return
from clstm_ppo.env.state import flat_row
from clstm_ppo.market.observed import observed_market_data


@pytest.fixture(scope="module")
def market():
    # No stock targets: every change in equity is the options' P&L and the cash's interest.
    cfg = load_config("smoke", ["env.dtype=float64", "market.stock_targets=[]", "env.episode_length=40"])
    return cfg, observed_market_data(cfg)


def test_the_slots_pnl_and_the_cash_interest_are_the_change_in_equity(market):
    """Random valid orders, closes, expiries and restarts: each step's P&L over the slots plus what the cash earned
    is the step's change in equity, and a position's P&L summed over its life is what it realised."""
    cfg, data = market
    env = BatchedOptionsEnv(data, "train", cfg.market, cfg.env, 16, seed=1, records=False, slot_pnl=True)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    life = torch.zeros(cfg.env.max_positions, 16, dtype=torch.float64)  # each slot's position's P&L so far
    realised_total, closed_pnl = 0.0, 0.0
    checked = 0
    for _ in range(300):
        before, cash = env.state, env.cash.clone()
        carry = cash * tbill_return(env.spec, flat_row(env.spec, before), before.t, before.t + 1)
        option_pnl_before = before.stats["option_pnl"].clone()
        result = env.step(random_valid(before.mask, gen))
        after = env.state
        done = result.terminated | result.truncated
        pnl = after.slot_pnl
        ongoing = ~done
        np.testing.assert_allclose((after.equity - before.equity - carry)[ongoing], pnl.sum((0, 1))[ongoing],
                                   atol=1e-6)
        # A closed position's P&L over its life is what closing it realised (stats' option_pnl, net of every cost).
        closed = before.active & (~after.active | after.slot_opened)
        life = life + pnl[0]
        realised_total += float((after.stats["option_pnl"] - option_pnl_before)[ongoing].sum())
        closed_pnl += float((life * closed)[:, ongoing].sum())
        life = torch.where(closed | after.slot_opened, pnl[1], life) * (~done).double()
        checked += int(ongoing.sum())
    assert checked > 3000 and realised_total != 0.0
    assert closed_pnl == pytest.approx(realised_total, rel=1e-9, abs=1e-6)


def reference_credit(rewards, slot_pnl, opened, dones, gamma, scale):
    """The same credit by walking each position forward from the step that opened it (plain Python)."""
    steps, slots, copies = opened.shape
    out = rewards.copy()
    for n in range(copies):
        for t in range(steps):
            out[t, n] -= scale * slot_pnl[t, :, :, n].sum()
            for p in range(slots):
                if not opened[t, p, n]:
                    continue
                total, u = slot_pnl[t, 1, p, n], t
                while u + 1 < steps and not dones[u, n] and not opened[u + 1, p, n]:
                    u += 1
                    total += gamma ** (u - t) * slot_pnl[u, 0, p, n]
                # the closing step of a position whose slot reopens at once: its part [0] is still this position's
                if u + 1 < steps and not dones[u, n] and opened[u + 1, p, n]:
                    total += gamma ** (u + 1 - t) * slot_pnl[u + 1, 0, p, n]
                out[t, n] += scale * total
    return out


def test_credit_equals_following_each_position_to_its_end():
    rng = np.random.default_rng(4)
    steps, slots, copies = 30, 3, 5
    rewards = rng.normal(size=(steps, copies))
    slot_pnl = rng.normal(size=(steps, 2, slots, copies))
    opened = rng.random((steps, slots, copies)) < 0.2
    slot_pnl[:, 1] *= opened  # only an opened slot has a new position's P&L
    dones = rng.random((steps, copies)) < 0.05
    got = position_credit(*(torch.as_tensor(x) for x in (rewards, slot_pnl, opened, dones)), 0.97, 0.1)
    np.testing.assert_allclose(got.numpy(), reference_credit(rewards, slot_pnl, opened, dones, 0.97, 0.1), rtol=1e-12)


def test_with_gamma_one_and_every_option_inside_the_rollout_the_rewards_sum_is_unchanged():
    steps, slots = 12, 2
    slot_pnl = torch.zeros(steps, 2, slots, 1, dtype=torch.float64)
    opened = torch.zeros(steps, slots, 1, dtype=torch.bool)
    opened[1, 0], opened[4, 1], opened[6, 0] = True, True, True  # slot 0 reopens at step 6 as its first closes
    slot_pnl[1, 1, 0], slot_pnl[2:7, 0, 0] = -3.0, torch.tensor([1.0, 2.0, -1.0, 4.0, 0.5]).unsqueeze(-1)
    slot_pnl[4, 1, 1], slot_pnl[5:9, 0, 1] = -1.0, 2.0
    slot_pnl[6, 1, 0], slot_pnl[7:10, 0, 0] = -2.0, 1.0
    rewards = 0.1 * slot_pnl.sum((1, 2)) + 0.01  # reward scale 0.1, and a carry of 0.01 a step
    credited = position_credit(rewards, slot_pnl, opened, torch.zeros(steps, 1, dtype=torch.bool), 1.0, 0.1)
    assert float(credited.sum()) == pytest.approx(float(rewards.sum()))
    assert float(credited[1, 0]) == pytest.approx(0.01 + 0.1 * (-3.0 + 1 + 2 - 1 + 4 + 0.5))  # the first option
    assert float(credited[6, 0]) == pytest.approx(0.01 + 0.1 * (-2.0 + 3.0))  # the one opened as it closed
    assert float(credited[3, 0]) == pytest.approx(0.01)  # opened nothing: its carry alone


def test_position_credit_refuses_the_dsr_reward():
    with pytest.raises(ConfigError, match="ppo.credit position"):
        load_config("smoke", ["ppo.credit=position", "env.reward=dsr"])


@pytest.mark.parametrize(("compile", "actions"), [
    ("off", "contracts"), pytest.param("on", "contracts", marks=pytest.mark.xdist_group("inductor")),
    ("off", "scale")], ids=["eager", "compiled", "scale"])
def test_a_run_credited_by_position_trains_and_resumes_exactly(tmp_path, compile, actions):
    """Both action modes; with ``scale`` (and the smoke config's start from nothing) this is the default agent."""
    from smoke_training import train

    from clstm_ppo.run_files.run_state import load_checkpoint

    common = ["--set", "ppo.credit=position", "--set", "ppo.lr_schedule=constant", "--set", f"agent.actions={actions}",
              "--set", f"launch.compile_loop={compile}", "--set", "train.eval_every=2"]
    batch = 16 * 32
    assert train(tmp_path / "a", "--total-steps", str(4 * batch), *common) == 0
    assert train(tmp_path / "b", "--total-steps", str(2 * batch), *common) == 0
    assert train(tmp_path / "b", "--total-steps", str(4 * batch), "--resume-from", "latest", *common) == 0
    a = load_checkpoint(tmp_path / "a" / "synthetic-smoke" / "latest.pt").model
    b = load_checkpoint(tmp_path / "b" / "synthetic-smoke" / "latest.pt").model
    for name in a:
        assert torch.equal(a[name], b[name]), name
