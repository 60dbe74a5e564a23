"""Few-shot tasks (no leakage), MAML's functional inner loop and meta-gradient, prototypes, the command."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import strict_loads
from torch import nn
from torch.func import grad

from clstm_ppo.config import AgentConfig, load_config
from clstm_ppo.data.dataset import build_market_data
from clstm_ppo.meta.maml import MamlConfig, inner_adapt, meta_gradient, query_loss
from clstm_ppo.meta.net import FewShotNet, params_of
from clstm_ppo.meta.protonet import proto_logits, prototypes
from clstm_ppo.meta.tasks import FewShotData, band, labels, sample_episodes

SHOTS, N_QUERY, K = 5, 15, 5


@pytest.fixture(scope="module")
def dow():
    return build_market_data(load_config(None, ["data.source=dow"]).data)


def _episodes(fs: FewShotData, region: str = "train", seed: int = 3):
    return sample_episodes(fs, list(range(len(fs.data.symbols))), fs.region(region), 200, SHOTS, N_QUERY,
                           np.random.default_rng(seed))


def test_support_and_query_share_no_date_and_labels_stay_in_the_window(dow):
    fs = FewShotData(dow, list(range(10)), K)
    for region in ("train", "later"):
        ep = _episodes(fs, region)
        lo, hi = fs.region(region)
        s_bars, q_bars = ep.support_rows.numpy() % fs.n_bars, ep.query_rows.numpy() % fs.n_bars
        for s, q, start, end in zip(s_bars, q_bars, ep.start, ep.end, strict=True):
            assert not set(s) & set(q)
            assert s.max() + K < q.min()  # the last close a support label reads comes before every query bar
            assert start >= lo and q.max() + K < end <= hi  # every label's close lies inside the window
        assert (ep.support_rows.numpy() // fs.n_bars == ep.symbol[:, None]).all()


def test_no_label_reads_past_its_window(dow):
    fs = FewShotData(dow, list(range(10)), K)
    ep = _episodes(fs)
    later = copy.deepcopy(dow)
    task = int(np.argmin(ep.end))  # scramble every close from this task's window end on
    rng = np.random.default_rng(0)
    later.bars["close"][:, ep.end[task]:] *= rng.uniform(0.5, 1.5, later.bars["close"][:, ep.end[task]:].shape)
    again = _episodes(FewShotData(later, list(range(10)), K))
    assert torch.equal(again.support_y[task], ep.support_y[task])
    assert torch.equal(again.query_y[task], ep.query_y[task])


def test_band_comes_from_the_support_set_alone(dow):
    fs = FewShotData(dow, list(range(10)), K)
    ep = _episodes(fs)
    s_ret = fs.forward_returns[ep.symbol[:, None], ep.support_rows.numpy() % fs.n_bars]
    q_ret = fs.forward_returns[ep.symbol[:, None], ep.query_rows.numpy() % fs.n_bars]
    lo, hi = band(s_ret)
    assert np.array_equal(labels(q_ret, lo, hi), ep.query_y.numpy())
    counts = np.bincount(ep.support_y.numpy().ravel(), minlength=3)  # 5/5/5 by construction, but for tied returns
    assert (abs(counts - 200 * SHOTS) <= 10).all()
    # Moving the query's prices (the closes only query labels read) leaves the support's band and labels as they were.
    task = 0
    moved = copy.deepcopy(dow)
    first_query_only = ep.start[task] + 3 * SHOTS + K + 1
    moved.bars["close"][ep.symbol[task], first_query_only:ep.end[task]] *= 1.3
    again = _episodes(FewShotData(moved, list(range(10)), K))
    assert torch.equal(again.support_y[task], ep.support_y[task])
    moved_returns = FewShotData(moved, list(range(10)), K).forward_returns
    assert np.array_equal(band(moved_returns[ep.symbol[task], ep.support_rows[task].numpy() % fs.n_bars])[0], lo[task])


def test_maml_inner_loop_is_two_steps_of_sgd():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    x, y, lr = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2]), 0.3
    adapted = inner_adapt(model, params_of(model), x, y, steps=2, lr=lr)
    w, b = model.weight.detach().clone().requires_grad_(), model.bias.detach().clone().requires_grad_()
    for _ in range(2):  # by hand
        gw, gb = torch.autograd.grad(nn.functional.cross_entropy(x @ w.T + b, y), (w, b))
        w, b = (w - lr * gw).detach().requires_grad_(), (b - lr * gb).detach().requires_grad_()
    assert torch.allclose(adapted["weight"], w, atol=1e-6) and torch.allclose(adapted["bias"], b, atol=1e-6)


def test_second_order_meta_gradient_matches_finite_differences():
    torch.manual_seed(1)
    model = nn.Linear(3, 3).double()
    params = params_of(model)
    xs, ys = torch.randn(6, 3, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1, 2])
    xq, yq = torch.randn(5, 3, dtype=torch.float64), torch.tensor([2, 1, 0, 0, 1])
    f = lambda p, fo=False: query_loss(model, p, xs, ys, xq, yq, steps=2, lr=0.8, first_order=fo)  # noqa: E731
    analytic, first = grad(f)(params), grad(lambda p: f(p, True))(params)
    eps = 1e-6
    for name, value in params.items():
        fd = torch.zeros_like(value)
        for i in range(value.numel()):
            bump = torch.zeros(value.numel(), dtype=value.dtype)
            bump[i] = eps
            up = {**params, name: value + bump.view_as(value)}
            down = {**params, name: value - bump.view_as(value)}
            fd.view(-1)[i] = (f(up) - f(down)) / (2 * eps)
        assert torch.allclose(analytic[name], fd, atol=1e-7), name
    assert not all(torch.allclose(analytic[n], first[n], atol=1e-4) for n in params)  # the second order matters
    # The batched (vmap) meta-gradient is the mean of the tasks' own.
    batch = [t.unsqueeze(0).repeat(2, *[1] * t.dim()) for t in (xs, ys, xq, yq)]
    mean, _ = meta_gradient(model, params, *batch, MamlConfig(inner_steps=2, inner_lr=0.8))
    assert all(torch.allclose(mean[n], analytic[n]) for n in params)


def test_prototypes_are_class_means_of_the_codes():
    torch.manual_seed(2)
    codes, y = torch.randn(4, 9, 5), torch.randint(0, 3, (4, 9))
    y[0] = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1, 1])  # class 2 absent in task 0
    protos, present = prototypes(codes, y)
    for e in range(4):
        for c in range(3):
            chosen = codes[e][y[e] == c]
            assert present[e, c] == (len(chosen) > 0)
            if len(chosen):
                assert torch.allclose(protos[e, c], chosen.mean(0), atol=1e-6)
    net = FewShotNet(11, AgentConfig(lstm1_hidden=8, mlp_hidden=8))
    xs, xq = torch.randn(4, 9, 6, 11), torch.randn(4, 3, 6, 11)
    out = proto_logits(net.encoder, xs, y, xq)
    assert (out[0, :, 2] < -1e8).all()  # a class without support bars is never predicted


def test_unrolled_encoder_equals_the_market_encoder():
    net = FewShotNet(11, AgentConfig(lstm1_hidden=8, mlp_hidden=8))
    x = torch.randn(5, 7, 11)
    assert torch.allclose(net(x), net.head(net.encoder(x)), atol=1e-6)


def test_fewshot_command_writes_the_metrics(tmp_path, capsys):
    from clstm_ppo.fewshot import main

    out = tmp_path / "fs.json"
    assert main(["--data", "dow", "--method", "protonet", "--iterations", "2", "--meta-batch", "2", "--episodes", "8",
                 "--folds", "2", "--json", str(out), "--set", "agent.lstm1_hidden=8",
                 "--set", "agent.mlp_hidden=8"]) == 0
    report = strict_loads(out.read_text())
    for method in ("protonet", "majority"):
        row = report[method]
        assert {"balanced_accuracy", "balanced_accuracy_ci", "accuracy", "macro_f1"} <= set(row)
        assert row["episodes"] == 8 and row["balanced_accuracy_ci"][0] <= row["balanced_accuracy"]


@pytest.mark.parametrize("method", ["maml", "protonet"])
def test_meta_pretraining_trains_the_agents_encoder(method):
    from clstm_ppo.agent.model import ActorCritic
    from clstm_ppo.config import ConfigError
    from clstm_ppo.pretraining.meta_learned import meta_pretrain_encoder

    cfg = load_config("smoke", ["pretrain.epochs=1", f"pretrain.method={method}"])
    data = build_market_data(cfg.data)
    agent = ActorCritic(len(data.feature_names), 4, 5, cfg.agent)
    before = {k: v.clone() for k, v in agent.encoder.state_dict().items()}
    history = meta_pretrain_encoder(agent.encoder, data, cfg, method, seed=0)
    assert len(history) == 1 and np.isfinite(history[0]["query_loss"])
    assert any(not torch.equal(before[k], v) for k, v in agent.encoder.state_dict().items())
    mlp = load_config("smoke", ["agent.kind=mlp"])
    with pytest.raises(ConfigError):
        meta_pretrain_encoder(ActorCritic(len(data.feature_names), 4, 5, mlp.agent).encoder, data, mlp,
                              method, seed=0)


def test_trainer_pretraining_dispatches_on_pretrain_method(tmp_path):
    from clstm_ppo.pretraining.encoder import pretrain
    from clstm_ppo.training.runner import Trainer

    cfg = load_config("smoke", ["pretrain.enabled=true", "pretrain.epochs=1",
                                "pretrain.method=protonet", "train.num_envs=2"])
    trainer = Trainer(cfg, tmp_path / "run", torch.device("cpu"))
    before = {k: v.clone() for k, v in trainer.model.encoder.state_dict().items()}
    pretrain(trainer.model, trainer.env.market_windows, trainer.data, cfg, trainer.ctx)
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.encoder.state_dict().items())
