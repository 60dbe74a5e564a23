"""The PPO update alone, by how its minibatch loss runs, on one stored rollout: speed, memory and how far each
path's weights land from the eager update's (scripts/bench/bench_update.py's docstring says what each path is;
docs/TRAINING.md, "Memory at scale", and docs/BENCHMARKS.md have the figures)."""
from __future__ import annotations

import copy
import time

import torch

from clstm_ppo.agent import ActorCritic, RolloutStorage, ppo_update, rollout
from clstm_ppo.agent.optimizer_step import OptimizerStep, make_adam
from clstm_ppo.agent.ppo import DistinctBarsLoss, MinibatchLoss, UpdatePaths
from clstm_ppo.agent.precision import Precision
from clstm_ppo.agent.static_update import StaticMinibatchLoss
from clstm_ppo.config import Config, load_config
from clstm_ppo.device import peak_memory_gb, start_peak_memory, wait_for
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv
from clstm_ppo.market.observed import observed_market_data

SIZES = ("default", "paper")  # the agent sizes of these named configs (configs/*.yaml)
PATHS = ("eager", "static", "compiled", "step_captured", "graphs", "captured")
CUDA_PATHS = ("step_captured", "graphs", "captured")
STEP_CAPTURED = ("step_captured", "captured")  # the paths whose optimizer step is one CUDA graph


def stored_rollout(data, cfg: Config, num_envs: int, precision: Precision, device: torch.device):
    """The untrained agent and one eager rollout of it, stored as the trainer stores it."""
    env = BatchedOptionsEnv(data, "train", cfg.market, cfg.env, num_envs, device=device, seed=0, records=False,
                            compile="off")
    torch.manual_seed(0)
    model = ActorCritic(len(data.feature_names), len(PORTFOLIO_FEATURES), env.actions.n,
                        cfg.agent).to(device)
    model.run_lstms_in_float32(precision.lstms_in_float32)
    storage = RolloutStorage(cfg.ppo.num_steps, num_envs, len(PORTFOLIO_FEATURES), env.actions.n, device)
    codes = rollout.bar_codes(model, env.market_windows, 1 << 62, precision)
    rollout.collect(model, env, storage, env.reset(), model.initial_state(num_envs, device), precision, cfg.ppo, codes)
    return model, storage, env.market_windows


def flat(model: torch.nn.Module) -> torch.Tensor:
    """Every weight of ``model`` in one float vector, to compare two updates' weights."""
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
    """One path's row: ``start`` copied and updated on ``storage`` once (compiling included), then ``updates`` timed
    times; ``reference`` keeps each path's weights after its first update (the eager one's is the yardstick)."""
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


def bench_update(device: torch.device, num_envs: list[int], sizes: str = "default", paths: tuple[str, ...] = PATHS,
                 precision: str = "fp32", updates: int = 2) -> tuple[list[dict], Config]:
    """A row per copy count and path (eager first: the others compare with it), and the config they ran."""
    cfg = Config()
    cfg.agent = load_config(sizes).agent
    data = observed_market_data(cfg)  # what an agent of cfg observes
    how = Precision(device, precision)
    rows = []
    for n in num_envs:
        model, storage, windows = stored_rollout(data, cfg, n, how, device)
        reference: dict[str, torch.Tensor] = {}
        for path in sorted(paths, key=PATHS.index):
            rows.append(measure(model, storage, windows, cfg, path, how, updates, device, reference))
    return rows, cfg
