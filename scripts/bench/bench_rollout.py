"""Rollout throughput: the policy and the env together, as the trainer collects, by how each decision runs.

    python scripts/bench/bench_rollout.py [--json] [--device cpu|cuda] [--num-envs 256 4096] [--sizes default|paper]
        [--paths eager compiled captured] [--seconds 3]

Paths: "eager" is ``rollout.collect`` (the policy op by op, the env's eager step); "compiled" is one compiled graph
per decision (policy as a cell, the draw, the env step and the storage write: ``agent/fused_rollout.py``);
"captured" replays that graph as one CUDA graph per decision (CUDA only). Each timed rollout includes what the
trainer does around it (LSTM 1's per-bar codes, GAE), on the embedded S&P 500's training split with the untrained
default agent, 128 steps per copy. The first rollout of each path runs from one seed and is compared with the
eager path's: "same_actions" is the share of equal actions (the graph sums in other orders, so a near-tie can
flip and the copies then part), "max_reward_diff" the largest reward difference before the first flip's step;
a captured rollout must equal the compiled one exactly ("equals_compiled").
"""
from __future__ import annotations

import argparse
import time

import torch

from clstm_ppo.agent import ActorCritic, RolloutStorage, rollout
from clstm_ppo.agent.fused_rollout import FusedRollout
from clstm_ppo.agent.precision import Precision
from clstm_ppo.config import Config, load_config
from clstm_ppo.device import DEVICE_CHOICES, configure_backends, pick_device, wait_for
from clstm_ppo.env import PORTFOLIO_FEATURES, BatchedOptionsEnv
from clstm_ppo.market.observed import observed_market_data
from clstm_ppo.tables import print_table

SIZES = ("default", "paper")  # the agent sizes of these named configs (configs/*.yaml)
PATHS = ("eager", "compiled", "captured")


class Collector:
    """One path's env, model, storage and rollout, built from one seed."""

    def __init__(self, data, cfg: Config, path: str, num_envs: int, device: torch.device):
        self.env = BatchedOptionsEnv(data, "train", cfg.market, cfg.env, num_envs, device=device, seed=0,
                                     records=False, compile="off" if path == "eager" else "on")
        torch.manual_seed(0)
        self.model = ActorCritic(len(data.feature_names), len(PORTFOLIO_FEATURES), self.env.actions.n,
                                 cfg.agent).to(device)
        self.precision, self.ppo, self.path = Precision(device, "fp32"), cfg.ppo, path
        self.storage = RolloutStorage(cfg.ppo.num_steps, num_envs, len(PORTFOLIO_FEATURES), self.env.actions.n, device)
        self.fused = None if path == "eager" else FusedRollout(self.model, self.env, self.storage, self.precision,
                                                               cuda_graphs=path == "captured")
        self.obs, self.state = self.env.reset(), self.model.initial_state(num_envs, device)
        torch.manual_seed(1)  # the draws

    def collect(self) -> None:
        codes = rollout.bar_codes(self.model, self.env.market_windows, 1 << 62, self.precision)  # always cached
        if self.fused is None:
            self.obs, self.state = rollout.collect(self.model, self.env, self.storage, self.obs, self.state,
                                                   self.precision, self.ppo, codes)
        else:
            self.obs, self.state = self.fused.collect(self.obs, self.state, codes, self.ppo.gamma, self.ppo.gae_lambda)


def compare(one: dict[str, torch.Tensor], eager: dict[str, torch.Tensor]) -> dict[str, float]:
    same = one["actions"] == eager["actions"]
    flipped = (~same).any(dim=1)
    first = int(flipped.nonzero()[0]) if flipped.any() else len(same)  # steps before any copy parted
    diff = (one["rewards"][:first] - eager["rewards"][:first]).abs().max().item() if first else float("nan")
    return {"same_actions": round(same.float().mean().item(), 4), "max_reward_diff": diff}


def measure(data, cfg: Config, path: str, num_envs: int, seconds: float, device: torch.device,
            reference: dict[str, dict[str, torch.Tensor]]) -> dict:
    run = Collector(data, cfg, path, num_envs, device)
    run.collect()  # compiles (and captures) on the first rollout: untimed, and the one compared
    snapshot = {k: v.clone() for k, v in vars(run.storage).items() if isinstance(v, torch.Tensor)}
    reference.setdefault(path, snapshot)
    rollouts, elapsed = 0, 0.0
    while elapsed < seconds or rollouts == 0:
        wait_for(device)
        start = time.perf_counter()
        run.collect()
        wait_for(device)
        elapsed += time.perf_counter() - start
        rollouts += 1
    row = {"path": run.fused.path if run.fused is not None else "eager", "num_envs": num_envs,
           "env_steps_per_s": round(rollouts * cfg.ppo.num_steps * num_envs / elapsed, 1),
           "ms_per_decision": round(1e3 * elapsed / (rollouts * cfg.ppo.num_steps), 3),
           "same_actions": "", "max_reward_diff": "", "equals_compiled": ""}  # where a comparison applies
    if "eager" in reference and path != "eager":
        row.update(compare(snapshot, reference["eager"]))
    if path == "captured" and "compiled" in reference:
        row["equals_compiled"] = all(torch.equal(snapshot[k], reference["compiled"][k])
                                     for k in ("actions", "rewards", "logprobs", "values", "portfolio"))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--device", default="cpu", choices=DEVICE_CHOICES)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[256])
    parser.add_argument("--sizes", default="default", choices=SIZES)
    parser.add_argument("--paths", nargs="+", default=["eager", "compiled"], choices=PATHS)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per row (at least one rollout)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = pick_device(args.device)
    configure_backends(device)
    if "captured" in args.paths and device.type != "cuda":
        parser.error("the captured path replays CUDA graphs: it needs --device cuda")
    cfg = Config()
    cfg.agent = load_config(args.sizes).agent
    data = observed_market_data(cfg)  # what an agent of cfg observes
    rows = []
    for num_envs in args.num_envs:
        reference: dict[str, dict[str, torch.Tensor]] = {}
        for path in sorted(args.paths, key=PATHS.index):  # eager first: the others compare with it
            rows.append(measure(data, cfg, path, num_envs, args.seconds, device, reference))
    print_table(rows, args.json, {"device": str(device), "sizes": args.sizes, "num_steps": cfg.ppo.num_steps})


if __name__ == "__main__":
    main()
