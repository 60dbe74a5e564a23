"""ppo.risk_aversion: the learner is paid each bar's mean-variance utility, x - k/2 x^2 of the bar's return x, and
under position credit each position bears the part of the bar's charge its P&L made (clstm_ppo/agent/storage.py)."""
import numpy as np
import pytest
import torch

from clstm_ppo.agent.storage import RolloutStorage, mean_variance, position_credit
from clstm_ppo.config import ConfigError, load_config

CASH, REWARD_SCALE = 1e6, 10.0
SCALE = REWARD_SCALE / CASH  # reward per dollar


def storage_with(rewards, slot_pnl, opened, risk_aversion, by_position):
    steps, copies = rewards.shape
    slots = slot_pnl.shape[2] if by_position else 0
    s = RolloutStorage(steps, copies, 3, 4, torch.device("cpu"), slots=slots,
                       credit_scale=SCALE if by_position else 0.0, risk_aversion=risk_aversion,
                       reward_unit=REWARD_SCALE)
    s.rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if by_position:
        s.slot_pnl = torch.as_tensor(slot_pnl, dtype=torch.float32)
        s.slot_opened = torch.as_tensor(opened)
    return s


def test_per_bar_each_reward_becomes_its_returns_utility():
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 0.02, size=(20, 3))  # bar returns, shares of initial cash
    s = storage_with(x * REWARD_SCALE, None, None, 4.0, by_position=False)
    s.finish(torch.zeros(3), gamma=0.0, lam=0.0)  # gamma 0, values 0: each return is its own reward
    np.testing.assert_allclose(s.returns.numpy(), REWARD_SCALE * (x - 2.0 * x ** 2), rtol=1e-5, atol=1e-9)


def test_at_zero_the_rewards_are_untouched_bit_for_bit():
    rng = np.random.default_rng(1)
    rewards = rng.normal(size=(16, 2)).astype(np.float32)
    slot_pnl = rng.normal(size=(16, 2, 3, 2)).astype(np.float32)
    opened = rng.random((16, 3, 2)) < 0.3
    a = storage_with(rewards, slot_pnl, opened, 0.0, by_position=True)
    a.finish(torch.zeros(2), 0.99, 0.95)
    dones = torch.zeros(16, 2, dtype=torch.bool)
    plain = position_credit(torch.as_tensor(rewards), torch.as_tensor(slot_pnl), torch.as_tensor(opened), dones,
                            0.99, SCALE)
    b = storage_with(rewards, slot_pnl, opened, 0.0, by_position=False)
    b.rewards = plain
    b.finish(torch.zeros(2), 0.99, 0.95)
    assert torch.equal(a.returns, b.returns)


def test_by_position_the_charges_sum_to_each_bars_charge():
    """Every option opened and closed inside the rollout, gamma 1: the credited rewards add up to the bars'
    utilities, so splitting the charge among the positions neither loses nor invents any of it."""
    rng = np.random.default_rng(2)
    steps, slots = 24, 3
    slot_pnl = np.zeros((steps, 2, slots, 1))
    opened = np.zeros((steps, slots, 1), dtype=bool)
    for slot, (start, end) in enumerate([(1, 9), (3, 15), (10, 20)]):
        opened[start, slot] = True
        slot_pnl[start, 1, slot] = rng.normal(0, 2e3)
        slot_pnl[start + 1:end + 1, 0, slot] = rng.normal(0, 5e3, size=(end - start, 1))
    carry = 40.0  # the cash's interest, a bar's part that no position made
    rewards = SCALE * (slot_pnl.sum((1, 2)) + carry)
    x = rewards / REWARD_SCALE
    utility = mean_variance(torch.as_tensor(rewards), torch.as_tensor(slot_pnl), 6.0, REWARD_SCALE)
    credited = position_credit(*utility, torch.as_tensor(opened), torch.zeros(steps, 1, dtype=torch.bool), 1.0, SCALE)
    assert float(credited.sum()) == pytest.approx(float((REWARD_SCALE * (x - 3.0 * x ** 2)).sum()), rel=1e-12)
    # the first option, alone in its bars, bears its own bars' whole charge; a step that opened nothing keeps the
    # carry's part of its bar's charge
    alone = [1, 2]
    own = [(SCALE * slot_pnl[t, :, 0, 0].sum()) * (1 - 3.0 * x[t, 0]) for t in alone]
    assert float(utility[1][1, 1, 0, 0] * SCALE) == pytest.approx(own[0])
    assert float(credited[0, 0]) == pytest.approx(SCALE * carry * (1 - 3.0 * x[0, 0]))


def test_a_sale_that_earns_nothing_on_average_is_worth_less_than_standing_aside():
    """The equity reward credits a zero-mean sale 0 on average, what holding cash earns; the utility charges its
    variance, so a risk-averse learner credits it below 0, and a sale with a small edge above 0."""
    rng = np.random.default_rng(3)
    steps, sales = 22, 2000
    pnl = rng.normal(0.0, 1.5e4, size=(steps - 1, sales))
    pnl -= pnl.mean(1, keepdims=True)  # every bar exactly zero-mean over the sales

    def credited(edge, risk_aversion):
        slot_pnl = np.zeros((steps, 2, 1, sales))
        slot_pnl[1:, 0, 0] = pnl + edge
        opened = np.zeros((steps, 1, sales), dtype=bool)
        opened[0] = True
        s = storage_with(SCALE * slot_pnl.sum((1, 2)), slot_pnl, opened, risk_aversion, by_position=True)
        s.finish(torch.zeros(sales), gamma=1.0, lam=1.0)
        return s.returns[0].double().numpy()  # values 0: the return is the sale's credit

    assert abs(credited(0.0, 0.0).mean()) < 1e-6
    averse = credited(0.0, 5.0)
    assert averse.mean() < -5 * averse.std() / np.sqrt(sales)
    assert credited(600.0, 5.0).mean() > 0


def test_risk_aversion_refuses_the_dsr_reward_and_negative_values():
    with pytest.raises(ConfigError, match="ppo.risk_aversion .* env.reward dsr"):
        load_config("smoke", ["ppo.risk_aversion=5", "env.reward=dsr"])
    with pytest.raises(ConfigError, match="ppo.risk_aversion"):
        load_config("smoke", ["ppo.risk_aversion=-1"])
    assert load_config("smoke", ["ppo.risk_aversion=5", "ppo.credit=position"]).ppo.risk_aversion == 5.0


def test_a_risk_averse_run_trains_and_records_its_aversion(tmp_path):
    from smoke_training import train

    from clstm_ppo.run_files.run_state import load_checkpoint

    assert train(tmp_path, "--total-steps", str(2 * 16 * 32), "--set", "ppo.risk_aversion=5",
                 "--set", "ppo.credit=position") == 0
    saved = load_checkpoint(tmp_path / "synthetic-smoke" / "latest.pt")
    assert saved.config["ppo"]["risk_aversion"] == 5.0
