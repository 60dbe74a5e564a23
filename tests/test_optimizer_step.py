"""The optimizer step the trainer takes, eager or captured in a CUDA graph: a learning rate given as a tensor, a
captured step that refuses to replay stale tensors, Adam's state across devices, and captures that fall back to
eager in one warning (docs/TRAINING.md)."""
import pytest
import torch


def test_a_learning_rate_tensor_filled_in_place_steps_as_the_same_rate_given_as_a_float():
    """A captured step reads the learning rate from one tensor: ``set_lr`` must fill that very tensor, and Adam
    must step by it as by the float (the CPU's Adam takes a tensor rate without foreach)."""
    from clstm_ppo.agent.optimizer_step import OptimizerStep

    torch.manual_seed(0)
    nets = [torch.nn.Linear(5, 3) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    rate = torch.tensor(1e-2)
    adams = [torch.optim.Adam(nets[0].parameters(), lr=1e-2), torch.optim.Adam(nets[1].parameters(), lr=rate,
                                                                              foreach=False)]
    steps = [OptimizerStep(a, max_grad_norm=0.5, capture=False) for a in adams]
    gen = torch.Generator().manual_seed(1)
    for lr in (1e-2, 3e-3, 5e-4):
        x = torch.randn(7, 5, generator=gen)
        for net, step in zip(nets, steps, strict=True):
            step.set_lr(lr)
            step.zero_grad()
            net(x).square().sum().backward()
            assert bool(step())
    assert adams[1].param_groups[0]["lr"] is rate and float(rate) == pytest.approx(5e-4)
    assert adams[0].param_groups[0]["lr"] == 5e-4
    for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


BREAKAGES = {"gradients set to None": lambda opt: opt.zero_grad(set_to_none=True),
             "optimizer state loaded": lambda opt: opt.load_state_dict(opt.state_dict()),
             "rate assigned as a float": lambda opt: opt.param_groups[0].__setitem__("lr", 1e-4)}


@pytest.mark.parametrize("breaking", BREAKAGES.values(), ids=BREAKAGES.keys())
def test_a_captured_step_refuses_to_replay_once_its_tensors_were_replaced(breaking):
    """What a replay reads was fixed at capture: gradients dropped to None, a loaded optimizer state, or a rate
    assigned as a float instead of filled must stop it with one line, not step stale tensors. (The capture itself
    needs CUDA; the check is host code, run here on the tensors a capture would have bound.)"""
    from clstm_ppo.agent.optimizer_step import OptimizerStep

    net = torch.nn.Linear(4, 2)
    step = OptimizerStep(torch.optim.Adam(net.parameters(), lr=torch.tensor(1e-3), foreach=False), 1.0, False)
    net(torch.ones(3, 4)).sum().backward()
    step()
    step.bound = step.live()  # as a capture records them
    step.set_lr(1e-4)
    step.optimizer.zero_grad(set_to_none=False)
    step.check_bound()  # filling the rate and zeroing in place keep every tensor
    breaking(step.optimizer)
    with pytest.raises(RuntimeError, match="tensors were replaced.*make a new OptimizerStep"):
        step.check_bound()


def test_a_saved_adam_state_takes_the_loading_runs_device_settings_and_keeps_its_moments():
    """A CPU run's checkpoint resumed where the step is captured (and the reverse, tests/test_resume.py): the loading
    optimizer keeps its own capturable flag, foreach and rate tensor; Adam's moments and step counts carry over, the
    counts where capturable Adam keeps them (as device tensors, on the parameters' device)."""
    from clstm_ppo.agent.optimizer_step import fit_saved_state

    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    written = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(3):
        written.zero_grad()
        net(torch.randn(5, 4)).square().sum().backward()
        written.step()
    saved = written.state_dict()
    rate = torch.tensor(5e-4)
    loading = torch.optim.Adam(net.parameters(), lr=rate, capturable=True, foreach=True)
    loading.load_state_dict(fit_saved_state(saved, loading))
    group = loading.param_groups[0]
    assert group["capturable"] and group["foreach"] and isinstance(group["lr"], torch.Tensor)
    assert float(group["lr"]) == pytest.approx(5e-4), "the loading run's rate, not the saved 1e-3"
    for param in net.parameters():
        state, before = loading.state[param], written.state[param]
        assert state["step"].dtype == torch.float32 and float(state["step"]) == 3.0
        for moment in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(state[moment], before[moment])
    assert saved["param_groups"][0]["lr"] == 1e-3 and not saved["param_groups"][0]["capturable"], "saved left as is"


def test_a_capture_cuda_refuses_leaves_the_step_eager_with_one_warning(monkeypatch):
    """Should CUDA refuse to capture the optimizer step, training goes on with the eager step (the same weights)
    and says why once. (Here the refusal is made: the capture itself needs CUDA.)"""
    from clstm_ppo.agent.optimizer_step import OptimizerStep

    def refuse():
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", refuse)
    nets = [torch.nn.Linear(4, 2) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    steps = [OptimizerStep(torch.optim.Adam(net.parameters(), lr=1e-2), 1.0, capture=False) for net in nets]
    steps[1].capture = True  # as on CUDA with a capturable Adam
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(2))
    for call in range(3):
        for net, step in zip(nets, steps, strict=True):
            net.zero_grad(set_to_none=True)  # e.g. another optimizer's zero_grad: zero_grad makes them again
            step.zero_grad()
            if step.capture:  # a capture reads gradients at fixed addresses: they exist, zeroed
                assert all(p.grad is not None and not p.grad.any() for p in net.parameters())
            net(x).square().sum().backward()
            if step is steps[1] and call == 1:
                with pytest.warns(UserWarning, match=r"capture of the optimizer step failed \(operation not "
                                                     r"permitted when stream is capturing\); it steps eagerly"):
                    assert bool(step())
            else:
                assert bool(step())
    assert not steps[1].capture and steps[1].path == "eager"
    for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_frozen_parameter_keeps_its_weights_under_a_captured_step():
    """Captured, gradients are zeroed in place rather than dropped; a parameter frozen after the step object was
    made (adapt's --part encoder) must still lose its gradient, else Adam steps its zero gradient by its moments."""
    from clstm_ppo.agent.optimizer_step import OptimizerStep

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    adam = torch.optim.Adam(net.parameters(), lr=1e-2)
    x = torch.randn(6, 4)
    net(x).square().sum().backward()
    adam.step()  # both layers now have Adam moments
    step = OptimizerStep(adam, 1.0, capture=False)
    step.capture = True  # as on CUDA: gradients at fixed addresses
    net[1].requires_grad_(False)
    frozen = [p.detach().clone() for p in net[1].parameters()]
    step.zero_grad()
    assert all(p.grad is None for p in net[1].parameters())
    net(x).square().sum().backward()
    assert bool(step())  # the first call steps eagerly
    for before, after in zip(frozen, net[1].parameters(), strict=True):
        assert torch.equal(before, after)


def test_a_refused_capture_restores_the_callers_stream_and_names_the_first_failure(monkeypatch):
    """torch.cuda.graph's exit fails in capture_end ("previous error") before restoring the stream when an operation
    inside the capture was refused: the capture helper's own stream context restores it, and its error names the
    refused operation. (CUDA's streams and graphs are stand-ins here that behave as torch's do on that path.)"""
    import contextlib

    from clstm_ppo.device import cuda_graph_capture

    events = []

    class Stream:
        def wait_stream(self, other):
            events.append("wait")

    @contextlib.contextmanager
    def stream(s):
        events.append("stream in")
        try:
            yield
        finally:
            events.append("stream restored")

    class Graph:
        def __init__(self, graph, stream=None, capture_error_mode="global"):
            assert capture_error_mode == "thread_local", "other threads (NCCL's watchdog) may call CUDA meanwhile"

        def __enter__(self):
            events.append("capture begin")

        def __exit__(self, *exc):  # capture_end raises, the inner stream context is never left
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torch.cuda, "graph", Graph)
    with pytest.raises(RuntimeError, match=r"^operation not permitted when stream is capturing$"):
        with cuda_graph_capture(object()):
            raise RuntimeError("operation not permitted when stream is capturing\nCUDA kernel errors ...")
    assert events == ["wait", "stream in", "capture begin", "stream restored"]
