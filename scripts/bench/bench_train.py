"""Training throughput: our trainer against sb3-contrib's RecurrentPPO on the same env, side by side.

    python scripts/bench/bench_train.py [--json] [--updates 2] [--settings default paper paper-256] [--device cpu|cuda]
        [--compiled] [--cuda-graphs [--update-graphs]] [--precision fp32|bf16|fp16] [--num-envs N] [--skip-sb3]
        [--sb3-warmup-steps N]

Settings: "default" and "paper" network sizes with 32 env copies, and paper sizes with 256
copies ("paper-256"), where copies on one underlying share bars and the update's encoding of
each distinct bar once matters most. Both train the embedded S&P 500 training split with the same copies, 128 steps per
copy per update, 4 epochs, 4 minibatches and the same network sizes: sb3-contrib gets
our LSTM 1 + MLP as its features extractor (through the gymnasium wrapper, one env per
DummyVecEnv slot) and one shared LSTM of LSTM 2's size with linear heads. Both run on
one thread. "MFU" is our model FLOP/s (forward in the rollout, forward + backward in
the update, counted analytically; a rollout that caches per-bar codes counts one encoding
per bar, an update that encodes each distinct bar of a minibatch once counts those) over a
dense float32 matmul's FLOP/s measured here. "update_encodes" is LSTM 1 window encodings per
update, beside "update_decisions", the decisions it trains on (what per-window encoding ran).
"ratio_at_peak" is the ratio ours would reach if every one of its model FLOPs ran at
that matmul speed (100% MFU): the ceiling for any trainer doing the same computation.
``--compiled`` compiles the env step (``env.compile: on``), and with it each rollout decision, and the encoder
(``train.compile``); ``--cuda-graphs`` also replays each decision as a CUDA graph (``train.cuda_graphs: on``), and
``--update-graphs`` the update's compiled loss too (``train.update_graphs``). "update" says how that loss ran.
"rollout" says how the decisions ran (captured, compiled or eager: agent/fused_rollout.py), "optimizer_step" how
the update's clip and Adam step ran (captured or eager: agent/optimizer_step.py) beside "optimizer_step_asked", how
the trainer asked it to run (captured on CUDA with --cuda-graphs outside fp16): the two differ where CUDA refused
the capture and the step ran eagerly, "rollout_share" the
share of the timed updates' seconds spent in rollouts. On a GPU sb3-contrib runs on the same GPU
(its policy there; its envs step on the host, as they always do).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from clstm_ppo.agent.model import MarketEncoder
from clstm_ppo.config import AgentConfig, Config, load_config
from clstm_ppo.device import DEVICE_CHOICES, configure_backends, pick_device, wait_for
from clstm_ppo.env import PORTFOLIO_FEATURES
from clstm_ppo.tables import print_table
from clstm_ppo.training.runner import Trainer

# setting -> (the named config whose agent sizes it trains, env copies)
SETTINGS = {"default": ("default", 32), "paper": ("paper", 32), "paper-256": ("paper", 256)}


def bench_config(agent: AgentConfig, num_envs: int) -> Config:
    cfg = Config()
    cfg.agent = agent
    cfg.train.num_envs = num_envs
    cfg.ppo.lr_schedule = "constant"
    return cfg


def forward_flops(cfg: Config, n_features: int, n_actions: int) -> tuple[float, float]:
    """Multiply-adds x 2 of one decision: (LSTM 1 over TW bars + the MLP, one LSTM 2 step + the heads)."""
    a, tw, p = cfg.agent, cfg.data.window, len(PORTFOLIO_FEATURES)
    lstm1 = tw * 4 * a.lstm1_hidden * (n_features + a.lstm1_hidden)
    mlp = a.lstm1_hidden * a.mlp_hidden + 2 * a.mlp_hidden * a.mlp_hidden
    lstm2 = 4 * a.lstm2_hidden * (a.mlp_hidden + p + a.lstm2_hidden)
    heads = a.lstm2_hidden * (n_actions + 1)
    return 2.0 * (lstm1 + mlp), 2.0 * (lstm2 + heads)


def ours(cfg: Config, updates: int, device: torch.device = torch.device("cpu")) -> dict[str, float]:
    """Env steps/s, model FLOP/s and LSTM 1 encodings per update of our trainer, over ``updates`` updates
    after one warm-up update."""
    encodes, rollout_s, update_s = [], 0.0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp), device)
        trainer.train_step()
        start = time.perf_counter()
        for _ in range(updates):
            stats, _ = trainer.train_step()
            rollout_s, update_s = rollout_s + stats["rollout_s"], update_s + stats["update_s"]
            minibatches = cfg.ppo.update_epochs * cfg.ppo.num_minibatches
            # A trainer without the per-bar update encodes every decision's window (how older commits count).
            encodes.append(stats.get("lstm1_encodes_per_minibatch", stats.get("decisions_per_minibatch", float(
                trainer.batch_size // cfg.ppo.num_minibatches))) * minibatches)
        elapsed = time.perf_counter() - start
    steps = updates * trainer.batch_size
    decisions = trainer.batch_size * cfg.ppo.update_epochs  # what the update trains on
    encoder, rest = forward_flops(cfg, len(trainer.data.feature_names), trainer.env.actions.n)
    # The rollout encodes each bar once when it caches bar codes, else every decision's window.
    cached = trainer.bar_codes() is not None
    cached_bars = len(trainer.env.market_windows.observable_rows()) if cached else trainer.batch_size
    rollout = updates * (cached_bars * encoder + trainer.batch_size * rest)
    update = sum(encodes) * encoder + updates * decisions * rest
    flops = rollout + 3 * update  # backward ~ 2x forward
    # The rollout's decisions: one CUDA graph replay, one compiled graph or op by op (agent/fused_rollout.py).
    return {"rate": steps / elapsed, "flops": flops / elapsed, "encodes": sum(encodes) / updates,
            "decisions": float(decisions), "rollout_encodes": float(cached_bars), "rollout_path": trainer.rollout_path,
            "update_path": trainer.update_path, "optimizer_step": trainer.optimizer_step_path,
            "optimizer_step_asked": trainer.optimizer_step.asked if trainer.optimizer_step is not None else "eager",
            "rollout_share": rollout_s / max(rollout_s + update_s, 1e-12)}


def sb3(cfg: Config, updates: int, device: torch.device = torch.device("cpu"), warmup_steps: int = 0) -> float:
    """sb3-contrib's env steps/s over ``updates`` updates, after a warm-up: one whole update of its own
    (``warmup_steps`` 0), or one update of a throwaway model of ``warmup_steps`` steps a copy on the same envs,
    which readies the same libraries and device kernels in a fraction of the time (a GPU lease's few minutes)."""
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from clstm_ppo.env.gym_env import OptionsTradingEnv
    from clstm_ppo.market.observed import observed_market_data

    data = observed_market_data(cfg)  # what an agent of cfg observes

    class WindowExtractor(BaseFeaturesExtractor):
        """Our LSTM 1 + MLP on the window, with the portfolio state beside it."""

        def __init__(self, observation_space):
            super().__init__(observation_space, cfg.agent.mlp_hidden + len(PORTFOLIO_FEATURES))
            self.encoder = MarketEncoder(len(data.feature_names), cfg.agent)

        def forward(self, obs):
            return torch.cat([self.encoder(obs["market"]), obs["portfolio"]], dim=-1)

    envs = DummyVecEnv([lambda: OptionsTradingEnv(data, split="train")] * cfg.train.num_envs)
    p = cfg.ppo

    def make_model(num_steps: int) -> RecurrentPPO:
        return RecurrentPPO(
            "MultiInputLstmPolicy", envs, n_steps=num_steps,
            batch_size=max(2, cfg.train.num_envs * num_steps // p.num_minibatches),
            n_epochs=p.update_epochs, learning_rate=p.learning_rate, gamma=p.gamma, gae_lambda=p.gae_lambda,
            clip_range=p.clip_coef, ent_coef=p.ent_coef, vf_coef=p.vf_coef, max_grad_norm=p.max_grad_norm,
            device=device.type,
            policy_kwargs=dict(features_extractor_class=WindowExtractor, lstm_hidden_size=cfg.agent.lstm2_hidden,
                               n_lstm_layers=1, shared_lstm=True, enable_critic_lstm=False,
                               net_arch=dict(pi=[], vf=[])),
        )

    batch = cfg.train.num_envs * p.num_steps
    timed = make_model(p.num_steps)
    if warmup_steps:
        make_model(warmup_steps).learn(cfg.train.num_envs * warmup_steps)
    else:
        timed.learn(batch)
    start = time.perf_counter()
    timed.learn(updates * batch, reset_num_timesteps=False)  # goes on from the warm-up (or from none)
    return updates * batch / (time.perf_counter() - start)


def matmul_flops(n: int = 1024, repeats: int = 20, device: torch.device = torch.device("cpu")) -> float:
    """A dense float32 matmul's FLOP/s on ``device`` (bigger on a GPU, where 1024 is too small to fill it)."""
    n = n if device.type == "cpu" else 8192
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    wait_for(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    wait_for(device)
    return 2 * n**3 * repeats / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--updates", type=int, default=2, help="timed updates per trainer (after one warm-up)")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS),
                        help="network sizes and env copies to time (default: all three)")
    parser.add_argument("--num-envs", type=int, help="env copies for every setting instead of its own (a GPU's 4,096)")
    parser.add_argument("--skip-sb3", action="store_true", help="time ours only")
    parser.add_argument("--sb3-warmup-steps", type=int, default=0,
                        help="warm sb3-contrib up with a throwaway model of this many steps a copy instead of one "
                             "whole update of its own (0, the default): on a GPU, minutes saved")
    parser.add_argument("--compiled", action="store_true", help="ours with the env step and the encoder compiled")
    parser.add_argument("--cuda-graphs", action="store_true", help="ours with each decision replayed as a CUDA graph")
    parser.add_argument("--update-graphs", action="store_true",
                        help="ours with the update's compiled loss replayed as CUDA graphs too (needs --cuda-graphs)")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                        help="ours' train.precision (sb3-contrib always runs fp32)")
    parser.add_argument("--device", default="cpu", choices=DEVICE_CHOICES, help="where ours trains (default cpu)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = pick_device(args.device)
    configure_backends(device)  # as the trainer's workers do; sb3-contrib runs under it too
    if args.sb3_warmup_steps < 0:
        parser.error(f"--sb3-warmup-steps is {args.sb3_warmup_steps}: give 0 (one whole update) or more steps")
    if args.cuda_graphs and device.type != "cuda":
        parser.error("--cuda-graphs needs a CUDA device (--device cuda)")
    if args.update_graphs and not args.cuda_graphs:
        parser.error("--update-graphs replays the update beside the captured rollout: add --cuda-graphs")
    peak = matmul_flops(device=device)
    rows = []
    for setting in args.settings:
        sizes, num_envs = SETTINGS[setting]
        num_envs = args.num_envs or num_envs
        cfg = bench_config(load_config(sizes).agent, num_envs)
        cfg.train.device = device.type
        cfg.train.precision = args.precision
        cfg.env.compile = "on" if args.compiled or args.cuda_graphs else "off"
        cfg.train.compile = args.compiled
        cfg.train.cuda_graphs = "on" if args.cuda_graphs else "off"
        cfg.train.update_graphs = args.update_graphs
        run = ours(cfg, args.updates, device)
        sb3_rate = float("nan") if args.skip_sb3 else sb3(cfg, args.updates, device, args.sb3_warmup_steps)
        rows.append({"setting": setting, "num_envs": num_envs, "precision": args.precision,
                     "step": "graphs" if args.cuda_graphs else "compiled" if args.compiled else "eager",
                     "rollout": run["rollout_path"], "update": run["update_path"],
                     "optimizer_step": run["optimizer_step"], "optimizer_step_asked": run["optimizer_step_asked"],
                     "rollout_share": round(run["rollout_share"], 3),
                     "ours_steps_per_s": round(run["rate"], 1),
                     "sb3_steps_per_s": round(sb3_rate, 1), "ratio": round(run["rate"] / sb3_rate, 2),
                     "update_encodes": round(run["encodes"]), "update_decisions": round(run["decisions"]),
                     "ours_gflops": round(run["flops"] / 1e9, 2), "mfu": round(run["flops"] / peak, 3),
                     "ratio_at_peak": round(peak / (run["flops"] / run["rate"]) / sb3_rate, 1)})
    print_table(rows, args.json, {"matmul_gflops_1_thread": round(peak / 1e9, 1), "updates_timed": args.updates})


if __name__ == "__main__":
    main()
