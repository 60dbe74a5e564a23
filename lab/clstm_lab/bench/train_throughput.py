"""Training throughput: our trainer against sb3-contrib's RecurrentPPO on the same env, side by side
(scripts/bench/bench_train.py prints it; docs/BENCHMARKS.md has the figures and what each column means).
"""
from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from clstm_ppo.agent.model import MarketEncoder
from clstm_ppo.config import WITHOUT_RULE_PRIOR, AgentConfig, Config, load_config
from clstm_ppo.device import wait_for
from clstm_ppo.env import PORTFOLIO_FEATURES
from clstm_ppo.training.runner import Trainer

# setting -> (the named config whose agent sizes it trains, env copies)
SETTINGS = {"default": ("default", 32), "paper": ("paper", 32), "paper-256": ("paper", 256)}


def bench_config(agent: AgentConfig, num_envs: int, rule_prior: bool = False) -> Config:
    # PPO's own speed on the workload every earlier row measured (the contracts agent paid per bar, the named
    # config `contracts`): sb3-contrib's side has no counterpart of the rule prior. With ``rule_prior`` that
    # config's prior stays (its clone runs before the timed updates; each update keeps its penalty and asks the
    # rule for its actions once).
    cfg = load_config("contracts", [] if rule_prior else list(WITHOUT_RULE_PRIOR))
    cfg.agent = dataclasses.replace(agent, actions=cfg.agent.actions)
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
                trainer.budget.batch_size // cfg.ppo.num_minibatches))) * minibatches)
        elapsed = time.perf_counter() - start
    steps = updates * trainer.budget.batch_size
    decisions = trainer.budget.batch_size * cfg.ppo.update_epochs  # what the update trains on
    encoder, rest = forward_flops(cfg, len(trainer.data.feature_names), trainer.env.actions.n)
    # The rollout encodes each bar once when it caches bar codes, else every decision's window.
    cached = trainer.rollout.bar_codes() is not None
    cached_bars = len(trainer.env.market_windows.observable_rows()) if cached else trainer.budget.batch_size
    rollout = updates * (cached_bars * encoder + trainer.budget.batch_size * rest)
    update = sum(encodes) * encoder + updates * decisions * rest
    flops = rollout + 3 * update  # backward ~ 2x forward
    # The rollout's decisions: one CUDA graph replay, one compiled graph or op by op (agent/fused_rollout.py).
    return {"rate": steps / elapsed, "flops": flops / elapsed, "encodes": sum(encodes) / updates,
            "decisions": float(decisions), "rollout_encodes": float(cached_bars), "rollout_path": trainer.rollout.path,
            "update_path": trainer.ppo_update.path, "optimizer_step": trainer.ppo_update.optimizer_step_path,
            "optimizer_step_asked": step.asked if (step := trainer.ppo_update.optimizer_step) is not None else "eager",
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


def throughput_rows(settings: list[str], updates: int, device: torch.device, *, num_envs: int | None = None,
                    precision: str = "fp32", compiled: bool = False, cuda_graphs: bool = False,
                    update_graphs: bool = False, skip_sb3: bool = False,
                    sb3_warmup_steps: int = 0, rule_prior: bool = False) -> tuple[list[dict[str, Any]], float]:
    """One row per setting (ours, sb3-contrib's and their ratio, how ours ran, its FLOP/s and MFU) and the dense
    matmul FLOP/s the MFU is measured against."""
    peak = matmul_flops(device=device)
    rows = []
    for setting in settings:
        sizes, copies = SETTINGS[setting]
        copies = num_envs or copies
        cfg = bench_config(load_config(sizes).agent, copies, rule_prior)
        cfg.launch.device = device.type
        cfg.launch.precision = precision
        cfg.launch.compile_loop = "on" if compiled or cuda_graphs else "off"
        cfg.launch.compile_encoder = compiled
        cfg.launch.cuda_graphs = "on" if cuda_graphs else "off"
        cfg.launch.update_graphs = update_graphs
        run = ours(cfg, updates, device)
        sb3_rate = float("nan") if skip_sb3 else sb3(cfg, updates, device, sb3_warmup_steps)
        rows.append({"setting": setting, "num_envs": copies, "precision": precision, "rule_prior": rule_prior,
                     "step": "graphs" if cuda_graphs else "compiled" if compiled else "eager",
                     "rollout": run["rollout_path"], "update": run["update_path"],
                     "optimizer_step": run["optimizer_step"], "optimizer_step_asked": run["optimizer_step_asked"],
                     "rollout_share": round(run["rollout_share"], 3),
                     "ours_steps_per_s": round(run["rate"], 1),
                     "sb3_steps_per_s": round(sb3_rate, 1), "ratio": round(run["rate"] / sb3_rate, 2),
                     "update_encodes": round(run["encodes"]), "update_decisions": round(run["decisions"]),
                     "ours_gflops": round(run["flops"] / 1e9, 2), "mfu": round(run["flops"] / peak, 3),
                     "ratio_at_peak": round(peak / (run["flops"] / run["rate"]) / sb3_rate, 1)})
    return rows, peak
