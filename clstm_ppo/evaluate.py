"""Deterministic backtests: the agent and two baselines (hold, random valid actions) on one split.

    python -m clstm_ppo.evaluate --checkpoint checkpoints/<run>/best_composite.pt [--split test] [--plot out.png]
                                 [--json metrics.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from clstm_ppo.agent.model import CascadedActorCritic, State
from clstm_ppo.checkpoint import load_checkpoint
from clstm_ppo.cli import run_cli
from clstm_ppo.config import Config, ConfigError, from_dict
from clstm_ppo.data.dataset import MarketData, build_market_data
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.device import DEVICE_CHOICES, configure_backends, pick_device
from clstm_ppo.env import PORTFOLIO_FEATURES, ActionSpace, BatchedOptionsEnv, Observation
from clstm_ppo.metrics import COST_FIELDS, concat_episodes, episode_metrics

Policy = Callable[[Observation, object], tuple[torch.Tensor, object]]


def agent_policy(model: CascadedActorCritic, num_envs: int, device: torch.device) -> tuple[Policy, State]:
    """Greedy (argmax) actions of ``model``, carrying LSTM 2's state."""
    def act(obs: Observation, state: State) -> tuple[torch.Tensor, State]:
        logits, _, state = model(obs.market.unsqueeze(0), obs.portfolio.unsqueeze(0), obs.mask.unsqueeze(0),
                                 obs.start.unsqueeze(0), state)
        return logits[0].argmax(-1), state
    return act, model.initial_state(num_envs, device)


def random_policy(seed: int) -> tuple[Policy, torch.Generator]:
    def act(obs: Observation, gen: torch.Generator) -> tuple[torch.Tensor, torch.Generator]:
        return torch.multinomial(obs.mask.float().cpu(), 1, generator=gen).squeeze(-1).to(obs.mask.device), gen
    return act, torch.Generator().manual_seed(seed)


def hold_policy() -> tuple[Policy, None]:
    return (lambda obs, state: (torch.zeros(obs.mask.shape[0], dtype=torch.long, device=obs.mask.device), None)), None


@torch.no_grad()
def run_episodes(policy: Policy, state: object, data: MarketData, split: str, cfg: Config, count: int,
                 device: torch.device) -> dict[str, np.ndarray]:
    """One episode per copy from evenly spread starts; every copy's first finish is recorded."""
    env = BatchedOptionsEnv(data, split, cfg.market, cfg.env, count, device=device, seed=cfg.seed, autoreset=False)
    obs = env.reset(starts=env.evaluation_starts(count))
    finished = np.zeros(count, dtype=bool)
    chunks = []
    while not finished.all():
        action, state = policy(obs, state)
        result = env.step(action)
        obs = result.obs
        if result.episodes is not None:
            first = ~finished[result.episodes["env"]]
            chunks.append({k: v[first] for k, v in result.episodes.items()})
            finished[result.episodes["env"][first]] = True
    return concat_episodes(chunks)


def evaluate_agent(model: CascadedActorCritic, data: MarketData, split: str, cfg: Config, count: int,
                   device: torch.device) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    model.eval()
    policy, state = agent_policy(model, count, device)
    episodes = run_episodes(policy, state, data, split, cfg, count, device)
    model.train()
    return episode_metrics(episodes), episodes


def model_from_checkpoint(state: dict, data: MarketData, cfg: Config, device: torch.device) -> CascadedActorCritic:
    model = CascadedActorCritic(len(data.feature_names), len(PORTFOLIO_FEATURES),
                                ActionSpace.from_config(cfg.market).n, cfg.agent).to(device)
    model.load_state_dict(state["model"])
    return model


REPORT_KEYS = ("return", "return_pct", "sharpe", "sortino", "max_drawdown", "win_rate", "profit_rate", "composite",
               "closed", "open", "costs")


def format_table(metrics: dict[str, dict[str, float]], keys: tuple[str, ...]) -> str:
    """One row per policy; every column as wide as its widest cell, so large dollar values never run together."""
    cells = {name: [f"{m[k]:,.4f}" for k in keys] for name, m in metrics.items()}
    widths = [max(len(k), *(len(row[i]) for row in cells.values())) for i, k in enumerate(keys)]
    lines = ["policy  " + "  ".join(k.rjust(w) for k, w in zip(keys, widths, strict=True))]
    lines += [f"{name:<8}" + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True))
              for name, row in cells.items()]
    return "\n".join(lines)


def check_plot_path(path: Path) -> None:
    """The plot's format is one matplotlib writes, and its folder exists (made if missing)."""
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise ConfigError(f"--plot {path}: matplotlib cannot write '{path.suffix or 'no suffix'}' files; "
                          f"end the name in one of .{', .'.join(sorted(formats))}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--plot {path}: cannot make its folder ({err.strerror}); choose another path") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clstm_ppo.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a .pt file written by python -m clstm_ppo.train")
    parser.add_argument("--split", default="test", choices=["train", "validation", "test"],
                        help="date split to backtest on (default test, the held-out one)")
    parser.add_argument("--episodes", type=int, default=16, help="episodes per policy, starts spread over the split")
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    parser.add_argument("--plot", default=None, help="write the equity curves to this image (.png, .pdf, .svg, ...)")
    parser.add_argument("--json", type=Path, default=None, help="also write every metric of every policy to this file")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        raise ConfigError(f"--episodes {args.episodes} must be at least 1")
    if args.plot:
        check_plot_path(Path(args.plot))  # before minutes of evaluation, not after
    if args.json and not args.json.parent.is_dir():
        raise ConfigError(f"--json {args.json}: folder {args.json.parent} does not exist")
    state = load_checkpoint(args.checkpoint)
    cfg = from_dict(Config, state["config"])
    device = pick_device(args.device)
    configure_backends(device)
    data = build_market_data(cfg.data, normalizer=Normalizer.from_state_dict(state["normalizer"]))
    model = model_from_checkpoint(state, data, cfg, device)
    results = {"agent": evaluate_agent(model, data, args.split, cfg, args.episodes, device)}
    for name, (policy, pstate) in {"hold": hold_policy(), "random": random_policy(cfg.seed)}.items():
        episodes = run_episodes(policy, pstate, data, args.split, cfg, args.episodes, device)
        results[name] = (episode_metrics(episodes), episodes)
    first, last = data.split_dates(args.split)
    print(f"{args.split} split {first.date()}..{last.date()}, {args.episodes} episodes of "
          f"{cfg.env.episode_length or 'all'} bars, checkpoint {args.checkpoint}")
    metrics = {name: m for name, (m, _) in results.items()}
    print(format_table(metrics, REPORT_KEYS))
    print("\ncosts by kind, $ per episode:")
    print(format_table(metrics, ("costs", *COST_FIELDS)))
    if args.json:
        args.json.write_text(json.dumps({"split": args.split, "first": str(first.date()), "last": str(last.date()),
                                         "episodes": args.episodes, "checkpoint": str(args.checkpoint),
                                         "policies": metrics}, indent=2))
        print(f"metrics written to {args.json}")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for (name, (_, eps)), color in zip(results.items(), ("C0", "C1", "C2"), strict=True):
            for i, curve in enumerate(eps["equity_curve"]):
                ax.plot(curve, color=color, alpha=0.6, label=name if i == 0 else None)
        ax.set_xlabel("bars into the episode")
        ax.set_ylabel("equity ($)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"equity curves written to {args.plot}")
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
