"""The execution plan (training/plan.py): one choice, from the config, device and world size, of how a run rolls
out, updates and steps its optimizer, with why; the trainer builds exactly the parts it names."""
import tempfile
from pathlib import Path

import pytest
import torch

from clstm_ppo.config import load_config
from clstm_ppo.training.plan import ExecutionPlan
from clstm_ppo.training.runner import Trainer

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def plan(device, world_size=1, *sets):
    return ExecutionPlan.choose(load_config("smoke", list(sets)), device, world_size)


@pytest.mark.parametrize(("device", "world", "sets", "expected"), [
    (CPU, 1, (), ("eager", "eager", False, "eager", False, "eager", "local")),
    (CPU, 1, ("launch.compile_loop=on",), ("compiled", "fused", False, "static", False, "eager", "local")),
    (CUDA, 1, (), ("compiled", "fused", True, "static", False, "captured", "local")),
    (CUDA, 1, ("launch.update_graphs=true",), ("compiled", "fused", True, "static", True, "captured", "local")),
    (CUDA, 1, ("launch.precision=fp16",), ("compiled", "fused", True, "static", False, "eager", "local")),
    (CUDA, 1, ("launch.cuda_graphs=off",), ("compiled", "fused", False, "static", False, "eager", "local")),
    (CUDA, 1, ("launch.compile_loop=off",), ("eager", "eager", False, "eager", False, "eager", "local")),
    (CPU, 2, (), ("eager", "eager", False, "eager", False, "eager", "ddp")),
    (CUDA, 4, (), ("compiled", "fused", True, "static", False, "captured", "all_reduce")),
], ids=["cpu", "cpu-compiled", "gpu", "gpu-update-graphs", "gpu-fp16", "gpu-no-graphs", "gpu-eager", "cpu-2-ranks",
        "gpu-4-ranks"])
def test_each_setting_and_device_gives_its_plan_and_says_why(device, world, sets, expected):
    p = plan(device, world, *sets)
    assert (p.env_step, p.rollout, p.rollout_graphs, p.update, p.update_graphs, p.optimizer_step,
            p.gradients) == expected
    line = p.describe()
    assert line.startswith(f"plan: env step {expected[0]}, rollout {expected[1]}")
    assert f"gradients {expected[6]}" in line
    assert f"launch.compile_loop {load_config('smoke', list(sets)).launch.compile_loop} on {device.type}" in line
    if "launch.precision=fp16" in sets:
        assert "fp16's loss scaler reads the gradients on the host" in line


@pytest.mark.parametrize("sets", [(), ("launch.compile_loop=on",)], ids=["eager", "compiled"])
def test_the_trainer_builds_the_parts_its_plan_names(sets):
    trainer = Trainer(load_config("smoke", list(sets)), Path(tempfile.mkdtemp()), CPU)
    p = trainer.plan
    assert p == plan(CPU, 1, *sets)
    assert trainer.env.compiled == (p.env_step == "compiled")
    assert (trainer.rollout.fused is not None) == (p.rollout == "fused")
    assert (trainer.ppo_update.static_loss is not None) == (p.update == "static")
    assert trainer.ppo_update.optimizer_step.path == p.optimizer_step
    assert trainer.ppo_update.train_model is trainer.model
