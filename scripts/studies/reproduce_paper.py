"""The CLSTM-PPO paper's comparison on our market, with seeds and walk-forward folds: does the cascaded LSTM earn
its keep, and does any agent beat owning the index?

    python scripts/studies/reproduce_paper.py [--data NAME_OR_FILE] [--steps N] [--seeds K] [--folds F]
        [--kinds clstm lstm mlp] [--rewards equity excess dsr] [--windows 5 15 30 50] [--num-gpus N]
        [--out DIR] [--grid NAME] [--grid-dir docs/data/grids] [--json] [--storage URL [--study NAME]]

Each cell of the grid (agent kind x reward x window x seed x fold) trains on its fold's training years, saves
its validation picks (best_composite.pt, the single best walk, and best_composite_smoothed.pt, the best mean of
the last train.selection_window walks; the test split is never read), and walks both on the fold's test years
with evaluate's continuous walk beside buy-and-hold, the MACD rule and best_rule (the best fixed rule of the
agent's own actions on the fold's validation years, clstm_ppo/backtest/rules.py). ``--folds F`` makes F expanding
walk-forward folds (clstm_ppo/data/folds.py; 0: the data's one default split; ``annual``: one test year a fold),
each with the market's fitted settings refitted on its own training years (clstm_ppo/backtest/calibration.py). Reported
over seeds x folds: mean +- std and bootstrap 95% intervals of every metric, paired differences (kind against kind, each
other reward against equity, each agent against buy-and-hold, best_rule and the PutWrite replica, the smoothed pick
against the single best), each fold's mean, and the deflated Sharpe ratio of the best configuration given how many were
tried. With several underlyings (the Dow stocks) each is walked on its own and a run's number is their mean. The window
ablation (clstm, equity reward) runs every window of --windows other than the config's. Every run's test metrics, and
each benchmark's walk of the same folds, are rows of docs/data/grids/<--grid>.csv with the commit, machine and command;
scripts/studies/results_tables.py makes docs/RESULTS.md's tables from those files. With --storage URL (an Optuna
storage) the grid becomes the trials of a study: start the same command in several processes or machines, each runs the
cells no other has claimed, and each gathers every cell's result from the storage. A --set value may name ``{fold}``:
each cell reads its own fold there (a generator fitted on that fold's training years, for ``data.augment_checkpoint``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from clstm_lab.studies.across_runs import (
    display,
    write_grid_csv,
)
from clstm_lab.studies.paper_grid import (
    KINDS,
    REWARDS,
    WINDOWS,
    data_label,
    gather,
    grid_rows,
    label,
    train_and_backtest,
)
from clstm_ppo.backtest.calibration import fold_market_settings
from clstm_ppo.config import ConfigError, load_config
from clstm_ppo.data import DataError, build_market_data
from clstm_ppo.data.folds import ANNUAL, folds_of
from clstm_ppo.tables import format_records, strict_json


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, timeout=10).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def machine() -> str:
    gpus = torch.cuda.device_count()
    where = f"{gpus} x {torch.cuda.get_device_name(0)}" if gpus else "no GPU"
    return f"{platform.machine()}, {os.cpu_count()} cores, {where}, torch {torch.__version__}"


def run_cells(args: argparse.Namespace, cells: list[dict[str, Any]], fits: dict) -> list[dict[str, Any]]:
    """Every cell's result: here, one after another, or with --storage shared with the study's other workers."""
    def one(cell: dict[str, Any]) -> dict[str, Any]:
        fold = "split" if cell["fold"] is None else f"fold {cell['fold']}"
        print(f"== {label(cell['kind'], cell['reward'])}, TW {cell['window']}, seed {cell['seed']}, {fold}",
              flush=True)
        return train_and_backtest(cell, fits, config=args.config, data=args.data, steps=args.steps, out=args.out,
                                  overrides=args.overrides, num_gpus=args.num_gpus)

    if not args.storage:
        return [one(cell) for cell in cells]
    from clstm_ppo.tuning.grid import run_grid

    def valued(cell: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        # a trial's value: the agent's test return (a grid to share, not a search: nothing is selected on it)
        result = one(cell)
        value = result["agent"]["total_return"]
        return (value if math.isfinite(value) else -math.inf), result

    name = args.study or f"reproduce-{data_label(args.data)}"
    try:
        return run_grid(args.storage, name, cells, valued)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None


def fold_fits(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each fold's dates and market settings refitted on its training years, kept in the run folder's
    folds.json (the same folds on a second launch, and a record of what each fold's runs were given)."""
    if args.folds == "0":
        return {}
    path = args.out / data_label(args.data) / "folds.json"
    cfg = load_config(args.config, [*args.overrides, f"data.source={args.data}"])
    try:
        folds = folds_of(build_market_data(cfg.data).dates, args.folds)
        if path.exists():
            fits = json.loads(path.read_text())
            if [fit["fold"] for fit in fits.values()] == [vars(f) for f in folds]:  # the same folds: keep their fits
                return fits
        fits = {str(f.index): {"fold": vars(f), **fold_market_settings(f, cfg.data, cfg.market)} for f in folds}
    except DataError as err:
        raise SystemExit(f"error: {err}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(strict_json(fits, indent=2))
    return fits


def bars_a_year(args: argparse.Namespace) -> float:
    """The data's bars a year (its clock, or data.periods_per_year), which annualise the deflated Sharpe ratio."""
    cfg = load_config(args.config, [*args.overrides, f"data.source={args.data}"])
    try:
        return build_market_data(cfg.data).periods_per_year
    except DataError as err:
        raise SystemExit(f"error: {err}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="sp500", help="a built-in name (sp500, dow, synthetic) or a file")
    parser.add_argument("--config", default="default", help="named config or YAML file every run starts from")
    parser.add_argument("--steps", type=int, default=300_000, help="env steps per training run")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per variant (at least 3 for the report)")
    parser.add_argument("--folds", default="0", help="walk-forward folds: a number of expanding blocks, or 'annual' "
                        "(one test year each, trained on every year before the validation year; 0: the data's "
                        "default split)")
    parser.add_argument("--num-gpus", type=int, default=1, help="passed through to the trainer")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--rewards", nargs="+", default=["equity", "excess"], choices=REWARDS,
                        help="env.reward values (default equity excess)")
    parser.add_argument("--windows", nargs="+", type=int, default=list(WINDOWS), help="TW values of the ablation")
    parser.add_argument("--out", type=Path, default=Path("checkpoints/reproduce_paper"), help="run folders")
    parser.add_argument("--grid", default=None, help="the grid's name (default: the data's), its CSV's file name")
    parser.add_argument("--grid-dir", type=Path, default=Path("docs/data/grids"),
                        help="where the grid's CSV goes: one row per run and per benchmark walk (default "
                             "docs/data/grids)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for every run, e.g. --set train.eval_every=5 (repeatable)")
    parser.add_argument("--json", action="store_true", help="print every number as one JSON object last")
    parser.add_argument("--storage", default=None, help="share the grid through this Optuna storage URL")
    parser.add_argument("--study", default=None, help="the grid's study name (default: reproduce-<data>)")
    args = parser.parse_args()
    if args.folds != ANNUAL and not args.folds.isdigit():
        raise SystemExit(f"error: --folds {args.folds!r}: give a number of folds (0 or more) or 'annual'")
    args.folds = args.folds if args.folds == ANNUAL else str(int(args.folds))
    if args.seeds < 1 or args.steps < 1:
        raise SystemExit("error: --seeds and --steps must be at least 1")
    started = datetime.datetime.now()
    base = load_config(args.config, args.overrides)  # every cell's settings before its own --set values
    default_window = base.data.window
    fits = fold_fits(args)
    folds: list[Any] = [int(k) for k in fits] or [None]
    configs = [(k, w, default_window) for w in args.rewards for k in args.kinds]
    configs += [("clstm", "equity", t) for t in args.windows if t != default_window]
    cells = [{"kind": k, "reward": w, "window": t, "seed": seed, "fold": fold}
             for fold in folds for k, w, t in configs for seed in range(args.seeds)]
    results = run_cells(args, cells, fits)
    tables = gather(cells, results, list(args.kinds), list(args.rewards), default_window, folds, bars_a_year(args))
    tables["folds"] = list(fits.values())
    print(format_records(display(tables["main"])))
    print()
    print(format_records(tables["paired"], digits=3))
    print(f"deflated Sharpe: {tables['deflated']}")
    name = args.grid or data_label(args.data)
    meta = {"grid": name, "commit": commit(), "date": started.date().isoformat(), "machine": machine(),
            "command": " ".join(["python", "scripts/studies/reproduce_paper.py", *sys.argv[1:]])}
    path = args.grid_dir / f"{name}.csv"
    write_grid_csv(path, grid_rows(cells, results, tables, default_window), meta)
    print(f"grid written to {path} ({(datetime.datetime.now() - started).total_seconds() / 60:.0f} min); "
          "scripts/studies/results_tables.py makes docs/RESULTS.md's tables from it")
    if args.json:
        print(strict_json({"data": args.data, "steps": args.steps, "seeds": args.seeds, **tables}))


if __name__ == "__main__":
    main()
