"""Training throughput: our trainer against sb3-contrib's RecurrentPPO on the same env, side by side.

    python scripts/bench_train.py [--json] [--updates 2] [--sizes default paper]

Both train the embedded S&P 500 training split with the same copies, 128 steps per
copy per update, 4 epochs, 4 minibatches and the same network sizes: sb3-contrib gets
our LSTM 1 + MLP as its features extractor (through the gymnasium wrapper, one env per
DummyVecEnv slot) and one shared LSTM of LSTM 2's size with linear heads. Both run on
one thread. "MFU" is our model FLOP/s (forward in the rollout, forward + backward in
the update, counted analytically; a rollout that caches per-bar codes counts one encoding
per bar) over a dense float32 matmul's FLOP/s measured here.
"ratio_at_peak" is the ratio ours would reach if every one of its model FLOPs ran at
that matmul speed (100% MFU): the ceiling for any trainer doing the same computation.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _table import print_table  # noqa: E402

from clstm_ppo.agent.model import MarketEncoder  # noqa: E402
from clstm_ppo.config import AgentConfig, Config  # noqa: E402
from clstm_ppo.device import DEVICE_CHOICES, configure_backends, pick_device, wait_for  # noqa: E402
from clstm_ppo.env import PORTFOLIO_FEATURES  # noqa: E402
from clstm_ppo.runner import Trainer  # noqa: E402

SIZES = {"default": AgentConfig(64, 64, 128), "paper": AgentConfig(128, 128, 512)}


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


def ours(cfg: Config, updates: int, device: torch.device = torch.device("cpu")) -> tuple[float, float]:
    """(env steps/s, model FLOP/s) of our trainer over ``updates`` updates after one warm-up update."""
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp), device)
        trainer.train_step()
        start = time.perf_counter()
        for _ in range(updates):
            trainer.train_step()
        elapsed = time.perf_counter() - start
    steps = updates * trainer.batch_size
    encoder, rest = forward_flops(cfg, len(trainer.data.feature_names), trainer.env.actions.n)
    # The rollout encodes each bar once when it caches bar codes, else every decision's window.
    cached_bars = len(trainer.env.observable_rows()) if trainer.bar_codes() is not None else trainer.batch_size
    rollout = updates * (cached_bars * encoder + trainer.batch_size * rest)
    flops = rollout + steps * (encoder + rest) * 3 * cfg.ppo.update_epochs  # backward ~ 2x forward
    return steps / elapsed, flops / elapsed


def sb3(cfg: Config, updates: int) -> float:
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from clstm_ppo.data import build_market_data
    from clstm_ppo.env.gym_env import OptionsTradingEnv

    data = build_market_data(cfg.data)

    class WindowExtractor(BaseFeaturesExtractor):
        """Our LSTM 1 + MLP on the window, with the portfolio state beside it."""

        def __init__(self, observation_space):
            super().__init__(observation_space, cfg.agent.mlp_hidden + len(PORTFOLIO_FEATURES))
            self.encoder = MarketEncoder(len(data.feature_names), cfg.agent)

        def forward(self, obs):
            return torch.cat([self.encoder(obs["market"]), obs["portfolio"]], dim=-1)

    envs = DummyVecEnv([lambda i=i: OptionsTradingEnv(data, split="train") for i in range(cfg.train.num_envs)])
    p = cfg.ppo
    model = RecurrentPPO(
        "MultiInputLstmPolicy", envs, n_steps=p.num_steps, batch_size=cfg.train.num_envs * p.num_steps // p.num_minibatches,
        n_epochs=p.update_epochs, learning_rate=p.learning_rate, gamma=p.gamma, gae_lambda=p.gae_lambda,
        clip_range=p.clip_coef, ent_coef=p.ent_coef, vf_coef=p.vf_coef, max_grad_norm=p.max_grad_norm, device="cpu",
        policy_kwargs=dict(features_extractor_class=WindowExtractor, lstm_hidden_size=cfg.agent.lstm2_hidden,
                           n_lstm_layers=1, shared_lstm=True, enable_critic_lstm=False, net_arch=dict(pi=[], vf=[])),
    )
    batch = cfg.train.num_envs * p.num_steps
    model.learn(batch)  # warm-up update
    start = time.perf_counter()
    model.learn(updates * batch, reset_num_timesteps=False)
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
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--skip-sb3", action="store_true", help="time ours only (always on a GPU)")
    parser.add_argument("--device", default="cpu", choices=DEVICE_CHOICES, help="where ours trains (default cpu)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = pick_device(args.device)
    configure_backends(device)  # as the trainer's workers do; sb3-contrib runs under it too
    args.skip_sb3 = args.skip_sb3 or device.type == "cuda"  # the ratio is a CPU comparison
    peak = matmul_flops(device=device)
    rows = []
    for size in args.sizes:
        cfg = bench_config(SIZES[size], args.num_envs)
        cfg.train.device = device.type
        our_rate, our_flops = ours(cfg, args.updates, device)
        sb3_rate = float("nan") if args.skip_sb3 else sb3(cfg, args.updates)
        rows.append({"sizes": size, "ours_steps_per_s": round(our_rate, 1), "sb3_steps_per_s": round(sb3_rate, 1),
                     "ratio": round(our_rate / sb3_rate, 2), "ours_gflops": round(our_flops / 1e9, 2),
                     "mfu": round(our_flops / peak, 3),
                     "ratio_at_peak": round(peak / (our_flops / our_rate) / sb3_rate, 1)})
    print_table(rows, args.json, {"matmul_gflops_1_thread": round(peak / 1e9, 1), "num_envs": args.num_envs,
                                  "updates_timed": args.updates})


if __name__ == "__main__":
    main()
