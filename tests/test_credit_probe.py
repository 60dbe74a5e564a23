"""scripts/studies/credit_probe.py's rows (clstm_lab.studies.credit_probe): a scale agent's free decisions by state and
multiple, update by update, from the trainer's own rollouts or a clean bandit on the same decisions."""
import pytest

from clstm_lab.studies.credit_probe import probe_rows

SMALL = ["data.planted.years=6", "data.planted.train_years=2", "data.planted.val_years=1", "agent.actions=scale",
         "agent.scale_rule=sell put 0.95 x 30d, every free slot", "agent.lstm1_hidden=8", "agent.mlp_hidden=8",
         "agent.lstm2_hidden=8", "train.num_envs=8", "ppo.num_steps=32", "ppo.num_minibatches=2",
         "pretrain.enabled=false", "prior.kl=0"]


def test_rows_split_every_free_decision_by_state_and_multiple(tmp_path):
    rows = list(probe_rows(SMALL, tmp_path, updates=2))
    assert len(rows) == 2 * 2 * 4  # updates x (rich, not) x multiples
    assert {r["multiple"] for r in rows} == {0.0, 0.5, 1.0, 1.5}
    for update in (0, 1):
        mine = [r for r in rows if r["update"] == update]
        assert sum(r["decisions"] for r in mine) > 0
        assert all(0.0 <= r["chosen_multiple"] <= 1.5 for r in mine)
    with pytest.raises(ValueError, match="scale agent"):
        next(probe_rows([*SMALL[:3], "agent.actions=contracts"], tmp_path / "contracts", updates=1))


def test_a_noiseless_bandit_pays_each_rich_decision_its_multiple(tmp_path):
    rows = [r for r in probe_rows(SMALL, tmp_path, updates=1, bandit=0.0) if r["decisions"]]
    rich = {r["multiple"]: r["mean_advantage"] for r in rows if r["rich"]}
    assert rich[1.5] > rich[0.0]  # paid 1.5 x the edge at once against nothing
