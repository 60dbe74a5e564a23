"""Distributed training really starting 2 CPU processes over gloo (the same code as NCCL on GPUs)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import strict_loads

from clstm_ppo.cli import run_cli
from clstm_ppo.config import load_config
from clstm_ppo.distributed import find_free_port
from clstm_ppo.run_files.run_state import load_checkpoint
from clstm_ppo.train import main as train_main
from clstm_ppo.training.launch import WorkersFailed, run_worker, spawn_workers

ROOT = Path(__file__).resolve().parents[1]
SMOKE = "smoke"
# --oversubscribe: under make test each pytest-xdist worker has one core, and these runs start two workers on it
SMALL = ["--set", "train.num_envs=8", "--set", "train.eval_every=2", "--oversubscribe"]


def smoke_config(total_steps: int, *extra: str):
    return load_config(SMOKE, ["train.num_envs=8", f"train.total_steps={total_steps}", "train.eval_every=2",
                               "launch.device=cpu", *extra])


def instrumented_worker(local_rank, ctx, cfg, run_dir, resume_path, threads):
    """run_worker, recording what this rank saw and wrote, for the assertions below."""
    import clstm_ppo.run_files.checkpoint as checkpoint
    import clstm_ppo.training.loop as loop
    import clstm_ppo.training.runner as runner

    writes, original_save = [], checkpoint.atomic_save
    checkpoint.atomic_save = lambda obj, path: (writes.append(str(path)), original_save(obj, path))
    trackers = []
    tracker_class = loop.Tracker
    loop.Tracker = lambda *a, **k: (trackers.append(1), tracker_class(*a, **k))[1]
    original_run = runner.Trainer.run

    def run_and_record(self):
        initial = {k: v.clone() for k, v in self.model.state_dict().items()}
        starts = self.env.t_start.clone()
        if os.environ.get("FAIL_RANK") == str(self.ctx.rank):
            original_step = self.train_step
            self.train_step = lambda: (_ for _ in ()).throw(RuntimeError("injected failure")) \
                if self.progress.update >= 2 else original_step()
        original_run(self)
        torch.save({"initial": initial, "final": self.model.state_dict(), "starts": starts, "writes": writes,
                    "trackers": len(trackers), "ddp": type(self.ppo_update.train_model).__name__},
                   Path(os.environ["RECORD_DIR"]) / f"rank{self.ctx.rank}.pt")

    runner.Trainer.run = run_and_record
    run_worker(local_rank, ctx, cfg, run_dir, resume_path, threads)


@pytest.mark.slow
def test_two_workers_hold_identical_weights_and_only_rank_0_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("RECORD_DIR", str(tmp_path))
    # 4 updates of 2 workers x 8 copies x 32 steps; accumulation exercises DDP's no_sync on every other backward
    cfg = smoke_config(4 * 2 * 8 * 32, "ppo.grad_accumulation=2")
    assert spawn_workers(2, cfg, tmp_path / "run", None, find_free_port(), 1, target=instrumented_worker) == 0
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert r0["ddp"] == r1["ddp"] == "DistributedDataParallel"
    for name in r0["final"]:
        assert torch.equal(r0["final"][name], r1["final"][name]), f"{name} differs across ranks"
        assert torch.equal(r0["initial"][name], r1["initial"][name]), f"{name} started differently"
    assert any(not torch.equal(r0["final"][n], r0["initial"][n]) for n in r0["final"]), "training changed nothing"
    moved = [n for n in r0["final"] if not torch.equal(r0["final"][n], r0["initial"][n])]
    assert len(moved) == len(r0["final"]), f"parameters that never moved: {set(r0['final']) - set(moved)}"
    assert not torch.equal(r0["starts"], r1["starts"]), "each rank should draw its own episodes"
    assert r1["writes"] == [] and r1["trackers"] == 0
    assert r0["trackers"] == 1 and any(w.endswith("latest.pt") for w in r0["writes"])
    state = load_checkpoint(tmp_path / "run" / "latest.pt")
    assert state.world_size == 2 and state.update == 4 and state.global_step == 4 * 512
    assert not any(k.startswith("module.") for k in state.model), "DDP must not enter the state_dict"


def average_known_gradients(rank: int, port: int, out: str) -> None:
    """One of two gloo ranks: gradients of rank + 1 times a known tensor, averaged, saved for the test."""
    import torch.distributed as dist

    from clstm_ppo.distributed import DistContext

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    module = torch.nn.Linear(3, 2)
    module.weight.grad = torch.full((2, 3), rank + 1.0)
    module.bias.grad = torch.arange(2.0) * (rank + 1)
    DistContext(rank=rank, world_size=2).average_gradients(module)
    torch.save({"weight": module.weight.grad, "bias": module.bias.grad}, Path(out) / f"grads{rank}.pt")
    dist.destroy_process_group()


def test_averaged_gradients_are_the_mean_over_ranks(tmp_path):
    """The static update's replacement for DDP's all-reduce: the mean, not the sum (Adam would hardly notice a
    gradient scaled by the world size, so identical weights across ranks cannot show it)."""
    torch.multiprocessing.spawn(average_known_gradients, args=(find_free_port(), str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        grads = torch.load(tmp_path / f"grads{rank}.pt")
        assert torch.equal(grads["weight"], torch.full((2, 3), 1.5))
        assert torch.equal(grads["bias"], torch.tensor([0.0, 1.5]))


def rank_object(rank: int) -> dict:
    """What rank ``rank`` sends: every dtype a rank's state holds, odd byte counts (so later tensors sit at unaligned
    offsets unless padded), empty and 0-d tensors, numpy and Python random states, and more bytes on rank 1."""
    import random

    import numpy as np

    g = torch.Generator().manual_seed(rank)
    state = {"flags": torch.rand(3, 7, generator=g) > 0.5, "cash": torch.rand(5, dtype=torch.float64, generator=g),
             "t": torch.tensor(rank * 11), "empty": torch.empty(0, 3),
             "key": torch.randint(0, 2**62, (4,), generator=g),
             "lstm": (torch.randn(1, 9, 6, generator=g), torch.randn(1, 9, 6, generator=g)),
             "rng": {"torch": torch.Generator().manual_seed(rank).get_state(),
                     "numpy": np.random.RandomState(rank).get_state(), "python": random.Random(rank).getstate()}}
    return {"state": None if rank == 0 else state, "gpu": {"util": 0.5 * rank}, "note": f"rank {rank}"}


def gather_known_objects(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from clstm_ppo.distributed import DistContext

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    gathered = DistContext(rank=rank, world_size=2).gather_to_main(rank_object(rank))
    torch.save(gathered, Path(out) / f"gathered{rank}.pt")
    dist.destroy_process_group()


def assert_same_object(got, want) -> None:
    import numpy as np

    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert (got.dtype, got.shape) == (want.dtype, want.shape) and torch.equal(got, want)
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            assert_same_object(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for one, other in zip(got, want, strict=True):
            assert_same_object(one, other)
    elif isinstance(want, np.ndarray):
        assert np.array_equal(got, want) and got.dtype == want.dtype
    else:
        assert got == want


def test_rank_states_reach_rank_0_bit_for_bit_as_one_tensor_gather(tmp_path):
    """gather_to_main sends a rank's tensors as one byte buffer (not pickled): rank 0 gets every rank's object back
    exactly, dtypes, shapes and containers included, though the ranks send different amounts, and can save it as a
    checkpoint (torch.save refuses views of one buffer as several dtypes); other ranks get []."""
    torch.multiprocessing.spawn(gather_known_objects, args=(find_free_port(), str(tmp_path)), nprocs=2)
    gathered = torch.load(tmp_path / "gathered0.pt", weights_only=False)
    assert len(gathered) == 2
    for rank, got in enumerate(gathered):
        assert_same_object(got, rank_object(rank))
    assert torch.load(tmp_path / "gathered1.pt") == []


@pytest.mark.slow
def test_two_workers_on_the_compiled_update_average_their_gradients(tmp_path, monkeypatch):
    """launch.compile_loop on: the static, compiled update does not run through DDP's forward; one all-reduce of the
    gradients per optimizer step must keep the ranks' weights identical while each rank trains on its own episodes
    (without it they part after the first step). Every update's log counts its collectives: none inside a capture,
    and exactly the ones the update makes."""
    monkeypatch.setenv("RECORD_DIR", str(tmp_path))
    # 32 copies a rank in minibatches of 8 copies x 32 steps: the compiled graphs of tests/test_resume.py's compiled
    # resume, so a cold CI machine compiles them once (this test runs after it)
    cfg = smoke_config(3 * 2 * 32 * 32, "train.num_envs=32", "launch.compile_loop=on", "ppo.num_minibatches=4",
                       "ppo.grad_accumulation=2")
    assert spawn_workers(2, cfg, tmp_path / "run", None, find_free_port(), 1, target=instrumented_worker) == 0
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert not torch.equal(r0["starts"], r1["starts"]), "each rank should draw its own episodes"
    assert r0["ddp"] == r1["ddp"] == "ActorCritic", "the static update needs no DDP wrapper"
    for name in r0["final"]:
        assert torch.equal(r0["final"][name], r1["final"][name]), f"{name} differs across ranks"
        assert not torch.equal(r0["final"][name], r0["initial"][name]), f"{name} never moved"
    assert load_checkpoint(tmp_path / "run" / "latest.pt").update == 3
    updates = [strict_loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in updates if r["kind"] == "update"]
    # Each update: the advantages' moments, 4 epochs x 4 minibatches / 2 accumulated = 8 averaged gradients and the
    # episode sums (10 all-reduces), one gather of the ranks' states; from the second on also the previous
    # boundary's stop agreement; the first also the initial broadcast of rank 0's weights.
    assert [r["collectives_all_reduce"] for r in updates] == [10, 11, 11]
    assert [r["collectives_gather"] for r in updates] == [1, 1, 1]
    assert [r.get("collectives_broadcast", 0) for r in updates] == [1, 0, 0]
    assert all(r["collectives_in_capture"] == 0 for r in updates)


def test_a_collective_inside_a_capture_is_refused_in_one_line(monkeypatch):
    """Where a CUDA graph is being captured, a collective would deadlock: the record refuses it (simulated here:
    the CPU captures nothing) and counts it."""
    from clstm_ppo.distributed import CollectiveRecord, DistContext

    record = CollectiveRecord()
    ctx = DistContext(rank=0, world_size=2, record=record)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(RuntimeError, match=r"a collective \(all_reduce\) was called while a CUDA graph was being "
                                           r"captured, where it would deadlock"):
        ctx.all_reduce_sum(torch.ones(2))
    assert record.take() == {"in_capture": 1} and record.take() == {"in_capture": 0}


def test_ranks_may_share_a_gpu_only_when_asked(monkeypatch):
    """--num-gpus 2 on one visible GPU is refused, unless launch.ranks_per_gpu lets two ranks share it (a test mode,
    over gloo); each rank's GPU is its local rank over ranks_per_gpu."""
    from clstm_ppo.config import ConfigError
    from clstm_ppo.distributed import DistContext
    from clstm_ppo.training import launch

    cfg = load_config(SMOKE, ["launch.device=auto"])
    shared = load_config(SMOKE, ["launch.device=auto", "launch.ranks_per_gpu=2"])
    monkeypatch.setattr(launch, "cuda_device_count", lambda: 1)
    with pytest.raises(ConfigError, match="--num-gpus 2 asks for more GPUs than the 1 visible"):
        launch.plan_workers(2, None, cfg)
    assert launch.plan_workers(2, None, shared) == (2, "cuda", None)
    assert [DistContext(rank=r, world_size=4, local_rank=r, ranks_per_gpu=2).gpu_index for r in range(4)] == \
        [0, 0, 1, 1]


@pytest.mark.slow
def test_an_exception_in_rank_1_ends_both_workers_quickly(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RECORD_DIR", str(tmp_path))
    monkeypatch.setenv("FAIL_RANK", "1")
    cfg = smoke_config(100 * 512)
    started = time.time()
    with pytest.raises(WorkersFailed, match=r"^worker \d failed: ") as failed:
        spawn_workers(2, cfg, tmp_path / "run", None, find_free_port(), 1, target=instrumented_worker)
    assert time.time() - started < 60 and "\n" not in str(failed.value)
    assert not (tmp_path / "rank0.pt").exists(), "rank 0 must not carry on alone"


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clstm_ppo.train", "--config", SMOKE, *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.slow
def test_num_gpus_falls_back_to_cpu_workers_and_resume_crosses_world_sizes(tmp_path):
    # Unstaggered, every copy's first (64-bar) episode ends within the first two updates (64 steps), so their
    # episode line, which names the workers, is written; staggered, the first full-length ones end later.
    base = ["--checkpoint-dir", str(tmp_path), *SMALL, "--set", "env.stagger_starts=false"]
    first = cli(*base, "--num-gpus", "2", "--total-steps", str(2 * 512), "--pretraining",
                "--set", "pretrain.epochs=1")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "pretraining LSTM 1" in first.stdout + first.stderr
    assert "no CUDA device is visible: running 2 CPU worker(s) over gloo instead" in first.stdout
    assert "| workers: 2" in first.stdout + first.stderr
    latest = tmp_path / "synthetic-smoke" / "latest.pt"
    assert load_checkpoint(latest).world_size == 2
    second = cli(*base, "--resume-from", "latest", "--total-steps", str(2 * 512 + 2 * 256))
    assert second.returncode == 0, second.stderr[-3000:]
    state = load_checkpoint(latest)
    assert "written by 2 worker(s)" in second.stdout and state.world_size == 1 and state.update == 4
    assert "env copies start fresh episodes (saved: 2 worker(s) x 8 copies; now 1 x 8)" in second.stdout + second.stderr
    # The first command again: the CPU fallback it chose is not carried into the run's settings as --device cpu.
    # ... with a changed learning rate, which this launch's settings decide.
    third = cli(*base, "--resume-from", "latest", "--num-gpus", "2", "--total-steps", str(2 * 512 + 2 * 256 + 2 * 512),
                "--set", "ppo.learning_rate=2e-3")
    assert third.returncode == 0, third.stderr[-3000:]
    state = load_checkpoint(latest)
    assert state.world_size == 2 and state.update == 6 and state.global_step == 2560
    # The rate decays by env steps over each launch's budget: base x (1 - steps before the update / budget),
    # whatever the batch (1 -> 2 workers once set it to 0 for the rest of the run).
    records = [strict_loads(line) for line in (latest.parent / "metrics.jsonl").read_text().splitlines()]
    rates = {r["step"]: r["learning_rate"] for r in records if r["kind"] == "update"}
    expected = {1280: 1e-3 * (1 - 1024 / 1536), 1536: 1e-3 * (1 - 1280 / 1536),  # 2 -> 1 worker, smoke's 1e-3
                2048: 2e-3 * (1 - 1536 / 2560), 2560: 2e-3 * (1 - 2048 / 2560)}  # 1 -> 2 workers, the new rate
    for step, rate in expected.items():
        assert rates[step] == pytest.approx(rate, rel=1e-6), (step, rates)
    # A checkpoint written by 2 workers backtests like any other.
    report = tmp_path / "report.json"
    evaluated = subprocess.run([sys.executable, "-m", "clstm_ppo.evaluate", "--checkpoint", str(latest), "--split",
                                "validation", "--json", str(report)], capture_output=True, text=True, timeout=120)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert set(strict_loads(report.read_text())["policies"]) >= {"agent", "buy_and_hold", "macd_rule"}


@pytest.mark.slow
def test_two_worker_resume_equals_an_uninterrupted_two_worker_run(tmp_path):
    """Every rank's env copies, LSTM state and random streams are saved, so a resume continues each rank exactly."""
    batch = 2 * 8 * 32  # env steps per update: 2 workers x 8 copies x 32 steps
    common = ["--device", "cpu", "--num-workers", "2", *SMALL, "--set", "ppo.lr_schedule=constant"]
    whole = cli("--checkpoint-dir", str(tmp_path / "a"), *common, "--total-steps", str(4 * batch))
    assert whole.returncode == 0, whole.stderr[-3000:]
    part = cli("--checkpoint-dir", str(tmp_path / "b"), *common, "--total-steps", str(2 * batch))
    assert part.returncode == 0, part.stderr[-3000:]
    saved = load_checkpoint(tmp_path / "b" / "synthetic-smoke" / "latest.pt")
    assert len(saved.ranks) == 2
    assert not torch.equal(saved.ranks[0].env["t_start"], saved.ranks[1].env["t_start"]), \
        "rank 1's own copies must be saved, not a second copy of rank 0's"
    rest = cli("--checkpoint-dir", str(tmp_path / "b"), *common, "--total-steps", str(4 * batch),
               "--resume-from", "latest")
    assert rest.returncode == 0, rest.stderr[-3000:]
    assert "resumed at update 2: env copies continue their episodes" in rest.stdout + rest.stderr
    a, b = (load_checkpoint(tmp_path / run / "synthetic-smoke" / "latest.pt") for run in ("a", "b"))
    assert a.update == b.update == 4
    for name in a.model:
        torch.testing.assert_close(b.model[name], a.model[name], rtol=1e-6, atol=1e-7, msg=name)
    for name in ("cash", "t", "expiry_time"):
        assert torch.equal(b.ranks[1].env[name], a.ranks[1].env[name]), name


@pytest.mark.slow
def test_sigterm_to_the_launcher_leaves_a_loadable_latest(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "clstm_ppo.train", "--config", SMOKE, "--checkpoint-dir",
                             str(tmp_path), "--device", "cpu", "--num-workers", "2", "--total-steps", "10000000",
                             *SMALL], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    latest = tmp_path / "synthetic-smoke" / "latest.pt"
    deadline = time.time() + 120
    while not latest.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert latest.exists(), proc.communicate(timeout=10)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert "stop requested: latest.pt written at update" in out + err
    assert err.count("SIGTERM: stopping after update") == 1, "rank 0 alone says it, once"
    state = load_checkpoint(latest)
    assert state.update >= 1 and state.world_size == 2


def torchrun(*args: str) -> list[str]:
    script = Path(sys.executable).with_name("torchrun")
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "torch.distributed.run"]
    return [*launcher, *args]


@pytest.mark.slow
def test_torchrun_single_node_trains(tmp_path):
    result = subprocess.run(torchrun("--nproc-per-node", "2", "--master-port", str(find_free_port()), "-m",
                                     "clstm_ppo.train", "--config", SMOKE, "--checkpoint-dir", str(tmp_path),
                                     "--total-steps", "1024", *SMALL),
                            capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    state = load_checkpoint(tmp_path / "synthetic-smoke" / "latest.pt")
    assert state.world_size == 2 and state.update == 2


@pytest.mark.slow
def test_two_torchrun_launchers_form_one_two_node_job(tmp_path):
    port = str(find_free_port())
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port]
    train = ["-m", "clstm_ppo.train", "--config", SMOKE, "--checkpoint-dir", str(tmp_path), "--total-steps", "1024",
             *SMALL]
    nodes = [subprocess.Popen(torchrun(*common, "--node-rank", str(rank), *train), cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outputs = [node.communicate(timeout=180) for node in nodes]
    for node, (_, err) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, err[-3000:]
    state = load_checkpoint(tmp_path / "synthetic-smoke" / "latest.pt")
    assert state.world_size == 2 and state.update == 2


def test_gpu_requests_that_cannot_be_met_are_clear_errors(tmp_path, capsys, monkeypatch):
    assert run_cli(train_main, ["--config", SMOKE, "--checkpoint-dir", str(tmp_path), "--device", "cuda"]) == 2
    assert "no CUDA device visible" in capsys.readouterr().err
    from clstm_ppo.training import launch

    monkeypatch.setattr(launch, "cuda_device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert run_cli(train_main, ["--config", SMOKE, "--checkpoint-dir", str(tmp_path), "--num-gpus", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: --num-gpus 4 asks for more GPUs than the 2 visible to this process "
                   "(CUDA_VISIBLE_DEVICES=0,1); use --num-gpus 2 or -1")
    assert run_cli(train_main, ["--config", SMOKE, "--checkpoint-dir", str(tmp_path), "--device", "cpu",
                                "--num-gpus", "2"]) == 2
    assert "use --num-workers N" in capsys.readouterr().err
    for flags, expected in ((["--num-gpus", "0"], "--num-gpus 0 must be -1 (every GPU) or at least 1"),
                            (["--num-gpus", "-3"], "--num-gpus -3 must be -1 (every GPU) or at least 1"),
                            (["--device", "cpu", "--num-workers", "0"], "--num-workers 0 must be at least 1")):
        monkeypatch.setattr(launch, "cuda_device_count", lambda: 0)  # refused on a CPU-only machine too
        assert run_cli(train_main, ["--config", SMOKE, "--checkpoint-dir", str(tmp_path), *flags]) == 2
        assert capsys.readouterr().err.strip() == f"error: {expected}"
    assert not any(tmp_path.iterdir()), "a refused launch writes nothing"
