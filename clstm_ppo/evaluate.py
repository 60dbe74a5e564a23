"""Backtest checkpoints against the index and trading rules: one continuous, date-indexed walk over a split.

    python -m clstm_ppo.evaluate --checkpoint checkpoints/<run>/best_composite.pt [more.pt ...] [--split test]
        [--data NAME_OR_FILE] [--set key=value ...] [--json F] [--returns F.csv] [--plot F.png] [--tearsheet F.html]

Every policy walks the same bars with the same costs and cash: the agent (greedy), buy_and_hold (the
underlying itself), putwrite and buywrite (CBOE's PUT and BXM rules), cash, random (valid actions, seeded),
macd_rule (a 30-day ATM call on an up-cross, a put on a down-cross) and long_straddle (30-day ATM straddles
rolled monthly). Several checkpoints (e.g. one per
seed) are reported each, then as mean +- std.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from clstm_ppo.agent.model import CascadedActorCritic
from clstm_ppo.backtest.cboe import buywrite, putwrite
from clstm_ppo.backtest.policies import agent_policy, cash_policy, long_straddle, macd_rule, random_policy
from clstm_ppo.backtest.report import (
    across_checkpoints,
    check_tearsheet,
    format_report,
    plot_equity,
    report_dict,
    underlying_metrics,
    write_returns_csv,
    write_tearsheet,
)
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.walk import buy_and_hold, walk
from clstm_ppo.checkpoint import CheckpointError, load_checkpoint
from clstm_ppo.cli import run_cli
from clstm_ppo.config import Config, ConfigError, first_line, load_config, to_dict
from clstm_ppo.data.dataset import SPLITS, MarketData, build_market_data
from clstm_ppo.data.normalize import Normalizer
from clstm_ppo.device import DEVICE_CHOICES, configure_backends, keep_freed_host_memory, pick_device
from clstm_ppo.env import PORTFOLIO_FEATURES, ActionSpace


def model_from_checkpoint(state: dict, data: MarketData, cfg: Config, device: torch.device) -> CascadedActorCritic:
    """The checkpoint's agent, of its ``cfg.agent.kind`` (``checkpoint_config`` reads an older one's as clstm)."""
    model = CascadedActorCritic(len(data.feature_names), len(PORTFOLIO_FEATURES),
                                ActionSpace.from_config(cfg.market).n, cfg.agent).to(device)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as err:
        raise CheckpointError(f"the checkpoint's model does not fit this version's agent ({first_line(err, 100)}); "
                              "it was written before the actions or the observed portfolio changed: retrain") from None
    return model


def checkpoint_config(state: dict, path: str, data_source: str | None, overrides: list[str]) -> Config:
    """The checkpoint's own settings, then ``--data`` and ``--set``; refused where the model could not read
    what they make (another window or action space) or would be another model (agent kind or sizes)."""
    base = json.loads(json.dumps(state["config"]))  # a deep copy
    # Written before agent.kind existed: the cascaded LSTM, whatever the default kind becomes.
    base.setdefault("agent", {}).setdefault("kind", "clstm")
    saved = load_config(None, [], base=json.loads(json.dumps(base)))
    if data_source is not None:  # another source: its own dates decide the splits, unless --set says
        base["data"].update(source=data_source, symbols=None, train_end=None, val_end=None)
    cfg = load_config(None, overrides, base=base)
    if cfg.data.window != saved.data.window:
        raise ConfigError(f"{path} was trained on {saved.data.window}-bar windows, not {cfg.data.window}; "
                          "evaluate it with its own data.window")
    if ActionSpace.from_config(cfg.market) != ActionSpace.from_config(saved.market):
        raise ConfigError(f"{path} was trained on the chain {saved.market.moneyness} x {saved.market.expiries_days} "
                          "days; keep market.moneyness and market.expiries_days as they were")
    if cfg.agent != saved.agent:
        raise ConfigError(f"{path}: agent sizes come from the checkpoint, as does agent.kind; drop the --set "
                          "agent.* overrides")
    return cfg


def load_agent(path: str, data_source: str | None, overrides: list[str],
               device: torch.device) -> tuple[Config, MarketData, CascadedActorCritic]:
    state = load_checkpoint(path)
    cfg = checkpoint_config(state, path, data_source, overrides)
    data = build_market_data(cfg.data, normalizer=Normalizer.from_state_dict(state["normalizer"]))
    model = model_from_checkpoint(state, data, cfg, device)
    model.eval()
    return cfg, data, model


def benchmarks(data: MarketData, split: str, cfg: Config, device: torch.device, seed: int) -> dict[str, WalkResult]:
    """Every benchmark on the same walk: the underlying, CBOE's PutWrite and BuyWrite (simulated directly, not
    through the action space), cash, random valid actions and two option rules."""
    actions, slots = ActionSpace.from_config(cfg.market), cfg.env.max_positions
    rules = {"cash": cash_policy(), "random": random_policy(seed), "macd_rule": macd_rule(data, actions, slots),
             "long_straddle": long_straddle(actions, slots)}
    out = {"buy_and_hold": buy_and_hold(data, split, cfg), "putwrite": putwrite(data, split, cfg),
           "buywrite": buywrite(data, split, cfg)}
    for name, (policy, state) in rules.items():
        out[name] = walk(name, policy, state, data, split, cfg, device)
    return out


def check_output_path(flag: str, path: Path | None, suffixes: tuple[str, ...] | None = None) -> None:
    """Before minutes of evaluation: the output's format is one it can be written in, its folder is made."""
    if path is None:
        return
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise ConfigError(f"{flag} {path}: end the name in {' or '.join(suffixes)}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{flag} {path}: cannot make its folder ({err.strerror}); choose another path") from None


def check_plot_path(path: Path) -> None:
    """The plot's format is one matplotlib writes, and its folder exists (made if missing)."""
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise ConfigError(f"--plot {path}: matplotlib cannot write '{path.suffix or 'no suffix'}' files; "
                          f"end the name in one of .{', .'.join(sorted(formats))}")
    check_output_path("--plot", path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clstm_ppo.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, nargs="+",
                        help="one or more .pt files written by python -m clstm_ppo.train (e.g. one per seed)")
    parser.add_argument("--split", default="test", choices=SPLITS,
                        help="date split to walk (default test, the held-out one; validation selects checkpoints)")
    parser.add_argument("--data", default=None,
                        help="another data source (a built-in name or a CSV/parquet file or folder); features are "
                             "normalised with the checkpoint's statistics; its dates decide the splits")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting of the checkpoint's, e.g. --set data.val_end=2017-12-31")
    parser.add_argument("--device", default="auto", choices=DEVICE_CHOICES)
    parser.add_argument("--seed", type=int, default=None, help="the random policy's seed (default: the run's seed)")
    parser.add_argument("--json", type=Path, default=None, help="write every number of every policy to this file")
    parser.add_argument("--returns", type=Path, default=None, help="write each policy's daily returns to this CSV")
    parser.add_argument("--plot", type=Path, default=None, help="equity and drawdown on a date axis (.png, .pdf, ...)")
    parser.add_argument("--tearsheet", type=Path, default=None,
                        help="an HTML tearsheet of the agent against buy_and_hold (needs the report extra: quantstats)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_output_path("--json", args.json)
    check_output_path("--returns", args.returns, (".csv",))
    check_output_path("--tearsheet", args.tearsheet, (".html",))
    if args.tearsheet:
        check_tearsheet()
    if args.plot:
        check_plot_path(args.plot)
    started = time.perf_counter()
    device = pick_device(args.device)
    configure_backends(device)
    keep_freed_host_memory()
    agents = [load_agent(path, args.data, args.overrides, device) for path in args.checkpoint]
    cfg, data, _ = agents[0]
    for path, (other, _, _) in zip(args.checkpoint[1:], agents[1:], strict=True):
        if to_dict(other.data) != to_dict(cfg.data) or to_dict(other.market) != to_dict(cfg.market):
            raise ConfigError(f"{path} and {args.checkpoint[0]} have different data or market settings; "
                              "compare checkpoints of one setup in one command")
    names = ["agent"] if len(agents) == 1 else [f"agent_{i + 1}" for i in range(len(agents))]
    results: dict[str, WalkResult] = {}
    for name, (agent_cfg, agent_data, model) in zip(names, agents, strict=True):
        policy, state = agent_policy(model, len(agent_data.symbols), device)
        results[name] = walk(name, policy, state, agent_data, args.split, agent_cfg, device)
    results.update(benchmarks(data, args.split, cfg, device, cfg.seed if args.seed is None else args.seed))

    first, last = results[names[0]].dates[[0, -1]]
    print(f"{args.split} split walked {first.date()}..{last.date()} ({len(results[names[0]].dates) - 1} daily "
          f"returns), data {cfg.data.source}, {len(agents)} checkpoint(s): {', '.join(args.checkpoint)}")
    print(format_report(results))
    summary = None
    if len(agents) > 1:
        summary = {symbol: across_checkpoints([underlying_metrics(results[n], s) for n in names])
                   for s, symbol in enumerate(data.symbols)}
        print("\nagent across checkpoints (mean +- std):")
        for symbol, stats in summary.items():
            for key in ("total_return", "annual_return", "sharpe", "max_drawdown", "win_rate", "trades"):
                print(f"  {symbol:<8} {key:<14} {stats[key]['mean']:>10.4f} +- {stats[key]['std']:.4f}")
    if args.json:
        report = {"split": args.split, "checkpoints": args.checkpoint, "data": cfg.data.source,
                  **report_dict(results), "across_checkpoints": summary}
        args.json.write_text(json.dumps(report, indent=2, default=str))
        print(f"every number written to {args.json}")
    if args.returns:
        write_returns_csv(results, args.returns)
        print(f"daily returns written to {args.returns}")
    if args.plot:
        plot_equity(results, args.plot)
        print(f"equity and drawdown written to {args.plot}")
    if args.tearsheet:
        write_tearsheet(results, args.tearsheet, policy=names[0])
        print(f"tearsheet written to {args.tearsheet}")
    print(f"evaluated in {time.perf_counter() - started:.1f} s")
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
