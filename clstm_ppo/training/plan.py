"""How a run executes, chosen once from its config, device and world size (docs/TRAINING.md, "How a
run executes"): the env step eager or compiled; the rollout's decisions eager or fused into one
compiled graph a step (replayed as a CUDA graph on CUDA); the update's loss eager (distinct bars,
fused LSTM runs: data-dependent shapes) or static (fixed shapes, compiled; optionally replayed as
CUDA graphs); the optimizer step eager or captured as one CUDA graph; and how several ranks share
gradients. The trainer builds its parts from the plan and reads nothing else to decide; its "ran as"
line then says what ran, where a capture fell back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from clstm_ppo.config import Config


@dataclass(frozen=True)
class ExecutionPlan:
    env_step: str  # "compiled" or "eager"
    # "fused": one compiled decision a step where every bar's code is cached, else eager; or "eager"
    rollout: str
    rollout_graphs: bool  # the fused decision (or a compiled env step) is replayed as a CUDA graph
    update: str  # "static" (fixed shapes, compiled) or "eager"
    update_graphs: bool  # the static loss's compiled calls are replayed as CUDA graphs
    optimizer_step: str  # "captured" (one CUDA graph with the update's static loss) or "eager"
    # "local" (one rank), "ddp" (DDP's forward averages them) or "all_reduce" (one before each step)
    gradients: str
    why: tuple[str, ...]  # a clause for each choice

    @classmethod
    def choose(cls, cfg: Config, device: torch.device, world_size: int = 1) -> "ExecutionPlan":
        launch, cuda = cfg.launch, device.type == "cuda"
        compiled = launch.compile_loop == "on" or (launch.compile_loop == "auto" and cuda)
        graphs = compiled and cuda and launch.cuda_graphs != "off"
        # fp16's GradScaler reads the gradients on the host, which a captured step cannot.
        captured = graphs and launch.precision != "fp16"
        why = [
            f"launch.compile_loop {launch.compile_loop} on {device.type}: the env step, the "
            f"rollout's decisions and the update's loss are {'compiled' if compiled else 'eager'}"
        ]
        if compiled:
            why.append(
                f"launch.cuda_graphs {launch.cuda_graphs}: "
                + (
                    "decisions replay as CUDA graphs"
                    if graphs
                    else "no CUDA graphs (a CPU has none to replay)"
                )
            )
        if graphs and not captured:
            why.append(
                "fp16's loss scaler reads the gradients on the host: the optimizer step stays eager"
            )
        if world_size > 1:
            why.append(
                "several ranks: "
                + (
                    "one all-reduce of the gradients before each optimizer step (the static "
                    "loss does not run through DDP's forward)"
                    if compiled
                    else "DDP averages the gradients in its backward"
                )
            )
        return cls(
            env_step="compiled" if compiled else "eager",
            rollout="fused" if compiled else "eager",
            rollout_graphs=graphs,
            update="static" if compiled else "eager",
            update_graphs=captured and launch.update_graphs,
            optimizer_step="captured" if captured else "eager",
            gradients="local" if world_size == 1 else "all_reduce" if compiled else "ddp",
            why=tuple(why),
        )

    def describe(self) -> str:
        """One line for the run's log: what was planned and why (what ran is the
        "ran as" line's)."""

        def graphs(on: bool) -> str:
            return " as CUDA graphs" if on else ""

        return (
            f"plan: env step {self.env_step}, rollout {self.rollout}{graphs(self.rollout_graphs)}, "
            f"update {self.update}{graphs(self.update_graphs)}, optimizer step "
            f"{self.optimizer_step}, gradients {self.gradients} ({'; '.join(self.why)})"
        )
