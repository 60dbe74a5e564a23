"""The PPO update alone, by how its minibatch loss runs, on one stored rollout.

    python scripts/bench/bench_update.py [--json] [--device cpu|cuda] [--num-envs 32 256] [--sizes default|paper]
        [--paths eager static compiled step_captured graphs captured] [--precision fp32|bf16|fp16] [--updates 2]

Paths: "eager" is ``ppo.DistinctBarsLoss``: LSTM 1 once per distinct bar of the minibatch, LSTM 2 in fused runs cut
at episode starts (the trainer's update without ``env.compile``). "static" is ``static_update.StaticMinibatchLoss``
op by op: fixed shapes, LSTM 2 as a loop with resets. "compiled" is the same compiled (the trainer's update with
``env.compile`` on). "step_captured" is "compiled" with the optimizer step (clip and Adam) replayed as one CUDA
graph (``agent/optimizer_step.py``): the trainer's update on CUDA under ``train.cuda_graphs``, fp32 or bf16.
"graphs" compiles it in reduce-overhead mode, each compiled call replayed as a CUDA graph
(CUDA only; the trainer does not use it yet). "captured" is "graphs" with the optimizer step also captured. The
last three need CUDA; the two with a captured step fp32 or bf16. All paths update the untrained
default agent from the same weights on the same eager rollout of the embedded S&P 500's training split (128 steps
per copy, 4 epochs of 4 minibatches), with the trainer's Adam.
"first_update_s" is the first update, compiling included; its weights are compared with the eager path's:
"diff_per_step" is the largest weight difference over the largest weight change of the eager update (Adam moves a
weight ~lr per step, so a gradient of ~0 that rounds to another sign differs by up to one step). Then ``--updates``
timed updates: "ms_per_update" and "decisions_per_s" (decisions trained on, epochs counted, per second).
"optimizer_step" says how the optimizer step ran, "optimizer_step_asked" how the path asked it to: they differ where
CUDA refused a capture, and the row then times an eager step. On a GPU, "peak_gb" is the most memory the path's
updates allocated and "update_gb" what that adds to the stored rollout and model: the update's activations, which
grow with a minibatch's decisions (docs/TRAINING.md, "Memory at scale"); blank on the CPU. On any device, for the
op-by-op paths (eager, static), what autograd keeps for backward from one minibatch's forward, in two parts (from a
minibatch and half of one): "saved_kb_per_decision", times a minibatch's decisions (copies / ppo.num_minibatches
x 128 steps), is what grows with the copies; "saved_gb_fixed" does not (the weights, LSTM 1 over the split's bars).
"""
from __future__ import annotations

import argparse
import copy
import time

import torch

from clstm_ppo.agent import CascadedActorCritic, RolloutStorage, ppo_update, rollout
from clstm_ppo.agent.optimizer_step import OptimizerStep, make_adam
from clstm_ppo.agent.ppo import DistinctBarsLoss, MinibatchLoss, UpdatePaths
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.static_update import StaticMinibatchLoss
from clstm_ppo.config import Config, load_config
from clstm_ppo.device import (
    DEVICE_CHOICES,
    configure_backends,
    peak_memory_gb,
    pick_device,
    start_peak_memory,
    wait_for,
)
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv
from clstm_ppo.market.observed import observed_market_data
from clstm_ppo.tables import print_table

SIZES = ("default", "paper")  # the agent sizes of these named configs (configs/*.yaml)
PATHS = ("eager", "static", "compiled", "step_captured", "graphs", "captured")
CUDA_PATHS = ("step_captured", "graphs", "captured")
STEP_CAPTURED = ("step_captured", "captured")  # the paths whose optimizer step is one CUDA graph


def stored_rollout(data, cfg: Config, num_envs: int, precision: Precision, device: torch.device):
    """The untrained agent and one eager rollout of it, stored as the trainer stores it."""
    env = BatchedOptionsEnv(data, "train", cfg.market, cfg.env, num_envs, device=device, seed=0, records=False,
                            compile="off")
    torch.manual_seed(0)
    model = CascadedActorCritic(len(data.feature_names), len(PORTFOLIO_FEATURES), env.actions.n,
                                cfg.agent).to(device)
    model.run_lstms_in_float32(precision.lstms_in_float32)
    storage = RolloutStorage(cfg.ppo.num_steps, num_envs, len(PORTFOLIO_FEATURES), env.actions.n, device)
    codes = rollout.bar_codes(model, env.market_windows, 1 << 62, precision)
    rollout.collect(model, env, storage, env.reset(), model.initial_state(num_envs, device), precision, cfg.ppo, codes)
    return model, storage, env.market_windows


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten().float() for p in model.parameters()])


def saved_bytes(loss: MinibatchLoss, storage: RolloutStorage, copies: int) -> int:
    """What autograd keeps for backward from the forward of a minibatch of the first ``copies`` env copies (op by
    op only: eager or static), each storage once."""
    kept: dict[int, int] = {}

    def pack(saved: torch.Tensor) -> torch.Tensor:
        kept[saved.untyped_storage().data_ptr()] = saved.untyped_storage().nbytes()
        return saved

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved):
        loss(torch.arange(copies, device=storage.rows.device), storage.advantages)
    return sum(kept.values())


def saved_memory(loss: MinibatchLoss, storage: RolloutStorage, num_minibatches: int) -> tuple[float, float]:
    """What a minibatch keeps for backward, split into KB per decision (its activations, which grow with the
    minibatch) and a fixed GB (the weights, LSTM 1 over the split's bars), from a minibatch and half of it."""
    copies = storage.num_envs // num_minibatches
    full, half = saved_bytes(loss, storage, copies), saved_bytes(loss, storage, copies // 2)
    per_decision = (full - half) / ((copies - copies // 2) * storage.num_steps)
    return per_decision / 1e3, (full - per_decision * copies * storage.num_steps) / 1e9


def measure(start: torch.nn.Module, storage: RolloutStorage, windows, cfg: Config, path: str, precision: Precision,
            updates: int, device: torch.device, reference: dict[str, torch.Tensor]) -> dict:
    model = copy.deepcopy(start)
    capture = path in STEP_CAPTURED
    optimizer = make_adam(model.parameters(), cfg.ppo.learning_rate, cfg.ppo, device if capture else None)
    step = OptimizerStep(optimizer, cfg.ppo.max_grad_norm, capture=True) if capture else None
    graphs = path in ("graphs", "captured")  # the loss's compiled calls replayed as CUDA graphs
    loss: MinibatchLoss = (
        DistinctBarsLoss(model, windows, storage, cfg.ppo, precision) if path == "eager" else
        StaticMinibatchLoss(model, windows, storage, cfg.ppo, precision, compile=path != "static", cuda_graphs=graphs))

    def update() -> dict[str, float]:
        return ppo_update(model, optimizer, storage, windows, cfg.ppo, torch.Generator().manual_seed(0),
                          UpdatePaths(precision=precision, minibatch_loss=loss, optimizer_step=step))

    wait_for(device)
    before_gb = start_peak_memory(device)  # the stored rollout and the model (on a GPU)
    began = time.perf_counter()
    stats = update()
    wait_for(device)
    first = time.perf_counter() - began
    weights = flat(model)
    reference.setdefault(path, weights)
    eager_step = (reference["eager"] - flat(start)).abs().max() if "eager" in reference else torch.tensor(float("nan"))
    began = time.perf_counter()
    for _ in range(updates):
        update()
    wait_for(device)
    elapsed = (time.perf_counter() - began) / updates
    decisions = storage.num_steps * storage.num_envs * cfg.ppo.update_epochs
    peak_gb = peak_memory_gb(device)
    saved = {"saved_kb_per_decision": "", "saved_gb_fixed": ""}  # compiled graphs keep what inductor chooses
    if path in ("eager", "static"):
        kb, gb = saved_memory(loss, storage, cfg.ppo.num_minibatches)
        saved = {"saved_kb_per_decision": round(kb, 2), "saved_gb_fixed": round(gb, 3)}
    return {"path": path, "num_envs": storage.num_envs, "first_update_s": round(first, 2),
            "ms_per_update": round(1e3 * elapsed, 1), "decisions_per_s": round(decisions / elapsed, 1),
            "encodes_per_minibatch": round(stats["lstm1_encodes_per_minibatch"]),
            "optimizer_step": step.path if step is not None else "eager",  # "eager" on a captured path: CUDA refused
            "optimizer_step_asked": step.asked if step is not None else "eager",
            # What the update adds to the memory the rollout and model hold: its activations and gradients, which
            # grow with a minibatch's decisions (x16 at 65,536 copies for the 4,096 of gpu_check); GPU only.
            "peak_gb": "" if peak_gb is None else round(peak_gb, 2),
            "update_gb": "" if peak_gb is None else round(peak_gb - before_gb, 2),
            **saved,
            "diff_per_step": "" if path == "eager" else
            round(float((weights - reference["eager"]).abs().max() / eager_step), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--device", default="cpu", choices=DEVICE_CHOICES)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[32])
    parser.add_argument("--sizes", default="default", choices=SIZES)
    parser.add_argument("--paths", nargs="+", default=["eager", "static", "compiled"], choices=PATHS)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"))
    parser.add_argument("--updates", type=int, default=2, help="timed updates per path (after the first)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = pick_device(args.device)
    configure_backends(device)
    if set(args.paths) & set(CUDA_PATHS) and device.type != "cuda":
        parser.error(f"the {', '.join(CUDA_PATHS)} paths replay CUDA graphs: they need --device cuda")
    if set(args.paths) & set(STEP_CAPTURED) and args.precision == "fp16":
        parser.error("a captured optimizer step does not unscale fp16 gradients: use --precision fp32 or bf16")
    cfg = Config()
    cfg.agent = load_config(args.sizes).agent
    data = observed_market_data(cfg)  # what an agent of cfg observes
    precision = Precision(device, args.precision)
    rows = []
    for num_envs in args.num_envs:
        model, storage, windows = stored_rollout(data, cfg, num_envs, precision, device)
        reference: dict[str, torch.Tensor] = {}
        for path in sorted(args.paths, key=PATHS.index):  # eager first: the others compare with it
            rows.append(measure(model, storage, windows, cfg, path, precision, args.updates, device, reference))
    print_table(rows, args.json, {"device": str(device), "sizes": args.sizes, "precision": args.precision,
                                  "num_steps": cfg.ppo.num_steps})


if __name__ == "__main__":
    main()
