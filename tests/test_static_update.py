"""The PPO update's minibatch loss in fixed shapes (``agent/static_update.py``): LSTM 2 as a fixed
loop with resets is the fused runs of ``decide``; the static loss and its gradients equal the eager loss's for every
agent kind, both ways of encoding, fp32 and bf16; compiled, it is a fixed set of graphs that later updates never
recompile (the trainer's whole set: tests/test_resume.py's compiled resume); two DDP workers on it keep identical
weights (tests/test_distributed.py)."""
import copy
import tempfile
from pathlib import Path

import pytest
import torch
from test_agent import collect_rollout

from clstm_ppo.agent.model import KINDS, ActorCritic
from clstm_ppo.agent.ppo import DistinctBarsLoss, UpdatePaths, normalise_advantages, ppo_update
from clstm_ppo.agent.precision import Precision, cpu_runs_bf16_lstm
from clstm_ppo.agent.static_update import StaticMinibatchLoss, recurrence_block
from clstm_ppo.config import AgentConfig, PPOConfig, load_config
from clstm_ppo.training.runner import Trainer

CPU = torch.device("cpu")


def test_recurrence_blocks_divide_the_rollout():
    assert [recurrence_block(n) for n in (1, 8, 12, 16, 40, 128, 96)] == [1, 8, 12, 16, 10, 16, 16]
    # No divisor of at least half a block: full blocks and a shorter last one, not one-step calls.
    assert [recurrence_block(n) for n in (17, 127, 18)] == [16, 16, 9]


@pytest.mark.parametrize("kind", ["clstm", "lstm"])
def test_the_fixed_loop_with_resets_is_the_fused_runs_of_decide(kind):
    """float64, so only the order of operations differs: the carried state, zeroed at every episode start
    (including step 0 of one sequence), and every block length."""
    torch.manual_seed(0)
    model = ActorCritic(5, 7, 9, AgentConfig(kind=kind, lstm1_hidden=8, mlp_hidden=8, lstm2_hidden=12))
    model = model.double()
    steps, envs = 12, 6
    code, portfolio = torch.randn(steps, envs, 8).double(), torch.randn(steps, envs, 7).double()
    mask = torch.rand(steps, envs, 9) < 0.8
    mask[..., 0] = True
    starts = torch.rand(steps, envs) < 0.2
    starts[0, 1] = starts[5, 2] = True
    state = tuple(torch.randn(1, envs, 12).double() for _ in range(2))
    want_logits, want_values, want_state = model.decide(code, portfolio, mask, starts, state)
    for block in (None, 1, 4, 5):
        logits, values, got_state = model.decide_static(code, portfolio, mask, starts, state, block)
        torch.testing.assert_close(logits, want_logits, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(values, want_values, rtol=1e-12, atol=1e-12)
        for got, want in zip(got_state, want_state, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def rollout_with_resets():
    """A rollout with several episode starts inside it, begun mid-episode from a non-zero LSTM state."""
    model, storage, env = collect_rollout(num_envs=6, steps=40, episode_length=9, warmup_steps=3)
    assert storage.starts[1:].any(dim=1).sum() >= 3
    return model, storage, env


def loss_and_gradients(model, loss, idx, advantages):
    model.zero_grad()
    value, stats = loss(idx, advantages)
    value.backward()
    return value.detach(), stats, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("by_bar", [True, False])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "bf16, LSTMs in fp32"])
def test_the_static_loss_and_its_gradients_equal_the_eager_losses(rollout_with_resets, kind, by_bar, precision):
    """by_bar: LSTM 1 encodes every observable bar once and the minibatch looks its codes up; otherwise every decision
    of the minibatch. "LSTMs in fp32": what bf16 does on CUDA and on a CPU without a bf16 LSTM
    (``Precision.lstms_in_float32``), the LSTMs outside autocast. Eager (uncompiled) here; the compiled twin is
    compared below."""
    if precision == "bf16" and not cpu_runs_bf16_lstm():
        pytest.skip("this CPU has no bf16 LSTM (oneDNN needs AVX-512): bf16 runs its LSTMs in fp32, the case beside")
    trained, storage, env = rollout_with_resets
    torch.manual_seed(1)
    model = ActorCritic(trained.encoder.lstm.input_size, storage.portfolio.shape[-1], storage.mask.shape[-1],
                        AgentConfig(kind=kind, lstm1_hidden=8, mlp_hidden=8, lstm2_hidden=12))
    model.run_lstms_in_float32(precision.endswith("fp32"))
    cfg, prec = PPOConfig(num_minibatches=2), Precision(CPU, precision.split(",")[0])
    advantages = normalise_advantages(storage.advantages)
    idx = torch.tensor([4, 1, 3])
    eager = loss_and_gradients(model, DistinctBarsLoss(model, env.market_windows, storage, cfg, prec), idx, advantages)
    static_loss = StaticMinibatchLoss(model, env.market_windows, storage, cfg, prec, compile=False, by_bar=by_bar)
    assert static_loss.encoded == (len(env.market_windows.observable_rows()) if by_bar else 40 * 3)
    static = loss_and_gradients(model, static_loss, idx, advantages)
    tol = {"rtol": 1e-5, "atol": 1e-6} if precision == "fp32" else {"rtol": 0.02, "atol": 0.02}
    torch.testing.assert_close(static[0], eager[0], **tol)
    torch.testing.assert_close(static[1], eager[1], **tol)
    assert static[2].keys() == eager[2].keys() == {n for n, _ in model.named_parameters()}
    for name, grad in eager[2].items():
        if precision == "fp32":
            torch.testing.assert_close(static[2][name], grad, rtol=1e-4, atol=1e-6, msg=name)
        else:  # bf16 rounds each path differently: the gradients point the same way
            cosine = torch.nn.functional.cosine_similarity(static[2][name].flatten(), grad.flatten(), dim=0)
            assert cosine > 0.95, (name, float(cosine))


def test_the_compiled_loss_equals_the_eager_static_loss_and_a_whole_update_with_it(rollout_with_resets):
    """40 steps: 4 blocks of LSTM 2's recurrence through one graph, and no recompile in a whole update."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    trained, storage, env = rollout_with_resets
    cfg, prec = PPOConfig(num_minibatches=2, update_epochs=2), Precision(CPU, "fp32")
    advantages, idx = normalise_advantages(storage.advantages), torch.tensor([4, 1, 3])
    eager = StaticMinibatchLoss(trained, env.market_windows, storage, cfg, prec, compile=False)
    compiled = StaticMinibatchLoss(trained, env.market_windows, storage, cfg, prec, compile=True)
    want, got = (loss_and_gradients(trained, loss, idx, advantages) for loss in (eager, compiled))
    torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got[1], want[1], rtol=1e-6, atol=1e-7)
    for name, grad in want[2].items():
        torch.testing.assert_close(got[2][name], grad, rtol=1e-5, atol=1e-7, msg=name)
    # A whole update (4 minibatches, 2 optimizer steps of accumulated gradients) on each loss: the same weights.
    weights = []
    for loss_kind in ("distinct", "compiled"):
        model = copy.deepcopy(trained)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        loss = None if loss_kind == "distinct" else StaticMinibatchLoss(model, env.market_windows, storage,
                                                                         cfg, prec, compile=True)
        stats = ppo_update(model, optimizer, storage, env.market_windows,
                           PPOConfig(num_minibatches=2, update_epochs=2, grad_accumulation=2),
                           torch.Generator().manual_seed(0), UpdatePaths(precision=prec, minibatch_loss=loss))
        assert stats["nonfinite"] == 0.0
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    start = torch.cat([p.detach().flatten() for p in trained.parameters()])
    assert (weights[0] - start).abs().max() > 1e-5, "the update should move the weights"
    # Adam's steps are ~lr wherever a gradient is not ~0: equal to a small part of one step.
    torch.testing.assert_close(weights[1], weights[0], rtol=0, atol=2e-5)
    assert not counters["recompiles"], dict(counters["recompiles"])
    assert not counters["graph_break"], dict(counters["graph_break"])


def test_update_graphs_replay_on_cuda_only_and_the_trainer_says_how_its_update_ran():
    """``launch.update_graphs`` asks for the loss's CUDA graphs beside the captured optimizer step; a CPU has neither,
    so its update runs compiled as before, and the trainer's "ran as" line says so."""
    cfg = load_config("smoke", ["launch.compile_loop=on", "launch.update_graphs=true"])
    trainer = Trainer(cfg, Path(tempfile.mkdtemp()), CPU)
    assert trainer.ppo_update.static_loss is not None and not trainer.ppo_update.static_loss.cuda_graphs
    assert trainer.rollout.fused is not None
    assert trainer.ppo_update.train_model is trainer.model, "the static update trains the raw module"
    assert trainer.ppo_update.path == "compiled" and "update compiled, optimizer step eager" in trainer.paths()
    eager = Trainer(load_config("smoke", ["launch.compile_loop=off"]), Path(tempfile.mkdtemp()), CPU)
    assert eager.ppo_update.path == "eager"


def test_a_loss_whose_cuda_graphs_inductor_skipped_computes_the_same_and_says_so(rollout_with_resets, monkeypatch):
    """Inductor compiles a "reduce-overhead" graph without its CUDA graph when it cannot capture it, silently but for
    a counter; on a CPU it always does. The loss in that mode equals the compiled one, counts its own skipped graphs
    (not those of other functions), and a trainer whose update asked for graphs reports them instead of "graphs"."""
    from clstm_ppo.device import compile_graph

    trained, storage, env = rollout_with_resets
    cfg, prec = PPOConfig(num_minibatches=2, update_epochs=2), Precision(CPU, "fp32")
    advantages, idx = normalise_advantages(storage.advantages), torch.tensor([4, 1, 3])
    compiled = StaticMinibatchLoss(trained, env.market_windows, storage, cfg, prec, compile=True)
    graphed = StaticMinibatchLoss(trained, env.market_windows, storage, cfg, prec, compile=True, cuda_graphs=True)
    want = loss_and_gradients(trained, compiled, idx, advantages)
    compile_graph(lambda x: (2 * x).sin(), "toy", cuda_graphs=True)(torch.ones(3))  # another function's skip
    got = loss_and_gradients(trained, graphed, idx, advantages)
    torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got[1], want[1], rtol=1e-6, atol=1e-7)
    assert compiled.cudagraph_skips == 0 and graphed.cudagraph_skips >= 2  # the recurrence block and the loss
    skipped = graphed.cudagraph_skips
    loss_and_gradients(trained, graphed, idx, advantages)
    assert graphed.cudagraph_skips == skipped, "counted when compiled, not again at each call"
    trainer = Trainer(load_config("smoke", ["launch.compile_loop=on"]), Path(tempfile.mkdtemp()), CPU)
    monkeypatch.setattr(trainer.ppo_update.static_loss, "cuda_graphs", True)
    assert trainer.ppo_update.path == "graphs"
    monkeypatch.setattr(trainer.ppo_update.static_loss, "cudagraph_skips", 2)
    assert trainer.ppo_update.path == "compiled (graphs without CUDA graphs: 2)"


def test_a_compiled_function_holds_many_shapes_and_fails_loudly_past_its_limit(monkeypatch):
    """A study trains runs of several kinds and folds in one process, each a new graph: more than dynamo's default
    8 must still run compiled, and past the limit the run stops with a line naming the function, never silently
    eager."""
    from torch._dynamo.utils import counters

    import clstm_ppo.device as device

    def double_sine(x):
        return (2 * x).sin()

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(device, "RECOMPILE_LIMIT", 12)
    compiled = device.compile_graph(double_sine, "test function")
    for n in range(1, 13):
        torch.testing.assert_close(compiled(torch.ones(n)), torch.full((n,), 2.0).sin())
    assert counters["stats"]["unique_graphs"] == 12
    with pytest.raises(RuntimeError, match="the compiled test function met its limit of 12 graphs in this process"):
        compiled(torch.ones(13))


def test_a_compile_that_cannot_write_its_code_is_one_line(tmp_path):
    """A full disk meets inductor first, writing the compiled code: the run must end in one line as a checkpoint
    write does, not in dynamo's traceback (scripts/ops/chaos.py's write-fails fault with launch.compile_loop on)."""
    import subprocess
    import sys

    script = f"""
import os, resource, signal
os.environ["TORCHINDUCTOR_CACHE_DIR"] = {str(tmp_path / "cache")!r}
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
import torch
from clstm_ppo.cli import run_cli
from clstm_ppo.device import compile_graph

def main(argv):
    compile_graph(lambda x: (2 * x).sin().cumsum(0), "test step")(torch.ones(100))
    return 0

raise SystemExit(run_cli(main, []))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "error: could not write the compiled test step's code (File too large); free disk space where inductor "
        "caches (TORCHINDUCTOR_CACHE_DIR) or set launch.compile_loop off")


def test_the_update_memory_benchmark_splits_saved_tensors_into_per_decision_and_fixed_parts():
    """bench_update's memory columns (docs/TRAINING.md, "Memory at scale") on a loss whose saved tensors are known:
    a per-decision activation of 10 floats saved twice (one storage), and a fixed weight of 1,000 floats."""
    from types import SimpleNamespace

    from clstm_lab.bench.update_paths import saved_memory
    steps, envs = 128, 64
    weight = torch.randn(1000, requires_grad=True)

    def loss(idx, advantages):
        x = torch.randn(steps, len(idx), 10, requires_grad=True)
        y = x * x  # saves x twice: one storage, counted once
        return (y.sum() * weight.sum() * weight).sum(), None  # saves the weight's sum and the weight

    storage = SimpleNamespace(num_envs=envs, num_steps=steps, rows=torch.zeros(1), advantages=None)
    per_decision_kb, fixed_gb = saved_memory(loss, storage, num_minibatches=4)
    assert per_decision_kb == pytest.approx(10 * 4 / 1e3)
    assert fixed_gb * 1e9 == pytest.approx(1000 * 4 + 4 + 4, abs=16)  # the weight, and two saved scalars
