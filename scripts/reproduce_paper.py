"""The CLSTM-PPO paper's comparison on our market, with seeds: does the cascaded LSTM earn its keep?

    python scripts/reproduce_paper.py [--data NAME_OR_FILE] [--steps N] [--seeds K] [--num-gpus N]
        [--out DIR] [--results docs/RESULTS.md] [--json] [--storage URL [--study NAME]]

For each agent kind (clstm, lstm, mlp) and seed, trains on the training split, selects the run's
best_composite.pt on the validation split (the trainer's own walks; the test split is never read),
backtests it on the test split with evaluate's continuous walk, and reports mean +- std over seeds of
cumulative return, annualised return, Sharpe, max drawdown and average profit per closed trade, beside
buy-and-hold and the MACD rule on the same bars. Then the window ablation (TW = 5, 15, 30, 50) for clstm.
With several underlyings (the Dow stocks) each is walked on its own and a run's number is their mean.
The section of --results for this data source is replaced (other sources' sections stay); --steps scales
it from a CPU run to a GPU run, and --num-gpus passes through to the trainer. With --storage URL (an Optuna
storage: sqlite:///grid.db, postgresql://...) the (kind, window, seed) grid becomes the trials of a study:
start the same command in several processes or machines, each runs the cells no other has claimed, and
each gathers every cell's result from the storage.
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

import numpy as np
import torch

from clstm_ppo.backtest.statistics import bootstrap_ci, paired_difference
from clstm_ppo.cli import run_cli
from clstm_ppo.config import ConfigError, load_config
from clstm_ppo.evaluate import main as evaluate_main
from clstm_ppo.tables import format_records, strict_json
from clstm_ppo.train import main as train_main

KINDS = ("clstm", "lstm", "mlp")
WINDOWS = (5, 15, 30, 50)
METRICS = ("total_return", "annual_return", "sharpe", "max_drawdown", "profit_per_trade", "trades")
BENCHMARKS = ("buy_and_hold", "macd_rule")
CI_METRICS = ("sharpe", "total_return")  # bootstrap intervals and paired differences


def train_and_backtest(args: argparse.Namespace, kind: str, window: int, seed: int) -> dict[str, dict[str, float]]:
    """One run trained, selected on validation and walked on test: policy -> metric -> mean over underlyings."""
    name = f"{kind}-tw{window}-seed{seed}"
    folder = args.out / data_label(args.data)
    sets = [x for s in (f"agent.kind={kind}", f"data.window={window}", *args.overrides) for x in ("--set", s)]
    run = folder / name
    if not (run / "best_composite.pt").exists():  # a finished run is reused: the script can be resumed
        code = run_cli(train_main, ["--config", args.config, "--data", args.data, "--seed", str(seed),
                                    "--total-steps", str(args.steps), "--checkpoint-dir", str(folder),
                                    "--run-name", name, "--num-gpus", str(args.num_gpus), "--fresh-start",
                                    *sets])
        if code != 0:
            raise SystemExit(f"error: training {name} failed (exit {code})")
    report = run / "test_report.json"
    code = run_cli(evaluate_main, ["--checkpoint", str(run / "best_composite.pt"), "--split", "test",
                                   "--json", str(report)])
    if code != 0:
        raise SystemExit(f"error: evaluating {name} failed (exit {code})")
    policies = json.loads(report.read_text())["policies"]
    return {policy: mean_over_underlyings(policies[policy]) for policy in ("agent", *BENCHMARKS)}


def mean_over_underlyings(by_symbol: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The paper's metrics of one policy, averaged over the underlyings walked (one copy each). Profit per trade
    is the closed options' own P&L per trade, every cost in (evaluate's report; null without trades)."""
    rows = []
    for m in by_symbol.values():
        per_trade = m.get("profit_per_trade")
        rows.append({"total_return": m["total_return"], "annual_return": m["annual_return"], "sharpe": m["sharpe"],
                     "max_drawdown": m["max_drawdown"], "trades": float(m["trades"]),
                     "profit_per_trade": math.nan if per_trade is None else float(per_trade)})
    return {k: float(np.nanmean([r[k] for r in rows])) if any(np.isfinite(r[k]) for r in rows) else math.nan
            for k in METRICS}


def summary_rows(runs: dict[str, list[dict[str, float]]]) -> list[dict[str, Any]]:
    """One row per label: mean +- std over its seeds (std with ddof 1) of every metric, and a bootstrap 95%
    interval of the mean for the headline metrics."""
    rows = []
    for label, seeds in runs.items():
        row: dict[str, Any] = {"policy": label, "seeds": len(seeds)}
        for key in METRICS:
            values = np.array([s[key] for s in seeds], dtype=float)
            finite = values[np.isfinite(values)]
            mean = float(finite.mean()) if finite.size else math.nan
            std = float(finite.std(ddof=1)) if finite.size > 1 else 0.0
            row[key] = mean
            row[f"{key}_std"] = std
            if key in CI_METRICS:
                row[f"{key}_ci"] = list(bootstrap_ci(values))
        rows.append(row)
    return rows


def paired_rows(runs: dict[str, list[dict[str, float]]], kinds: list[str]) -> list[dict[str, Any]]:
    """Paired differences over seeds (the same seed's runs): each agent kind against the others and against
    buy-and-hold, for each headline metric."""
    pairs = [(a, b) for i, a in enumerate(kinds) for b in kinds[i + 1:]] + [(k, "buy_and_hold") for k in kinds]
    rows = []
    for a, b in pairs:
        for key in CI_METRICS:
            d = paired_difference(np.array([r[key] for r in runs[a]]), np.array([r[key] for r in runs[b]]))
            rows.append({"pair": f"{a} - {b}", "metric": key, "mean": d["mean"], "ci_low": d["ci_low"],
                         "ci_high": d["ci_high"], "wins": d["wins"], "pairs": int(d["pairs"])})
    return rows


def display(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as text: percentages for returns and drawdowns, dollars per trade, mean +- std in one cell."""
    out = []
    for row in rows:
        cells: dict[str, Any] = {"policy": row["policy"], "seeds": row["seeds"]}
        for key in METRICS:
            mean, std = row[key], row[f"{key}_std"]
            if not math.isfinite(mean):
                cells[key] = "n/a"
            elif key in ("total_return", "annual_return", "max_drawdown"):
                cells[key] = f"{100 * mean:.2f}% +- {100 * std:.2f}"
            elif key == "profit_per_trade":
                cells[key] = f"${mean:,.0f} +- {std:,.0f}"
            else:
                cells[key] = f"{mean:.3f} +- {std:.3f}" if key == "sharpe" else f"{mean:.1f} +- {std:.1f}"
        out.append(cells)
    return out


def data_label(data: str) -> str:
    return Path(data).name.split(".")[0]


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


def markdown_section(args: argparse.Namespace, main: list[dict], ablation: list[dict], paired: list[dict],
                     per_seed: list[dict[str, Any]], seconds: float) -> str:
    label = data_label(args.data)
    command = " ".join(["python", "scripts/reproduce_paper.py", *sys.argv[1:]])
    lines = [f"<!-- begin {label} -->", f"## {label}", "",
             f"`{command}` at commit `{commit()}`, {datetime.date.today().isoformat()}; {machine()}; "
             f"{args.steps:,} env steps per run ({args.config} config otherwise), {args.seeds} seeds, "
             f"{seconds / 60:.0f} min in all. Each run's checkpoint is its best validation composite; every "
             "number below is on the test split. Mean +- std over seeds; with several underlyings, a run's "
             "number is the mean over them. Profit per trade: the walk's P&L over its closed option trades.",
             "", "### Agents against the benchmarks", "", "```", format_records(display(main)), "```", "",
             "### Paired differences over seeds (bootstrap 95% interval of the mean; wins: share of seeds)", "",
             "```", format_records(paired, digits=3), "```", "",
             "### Window ablation (clstm)", "", "```", format_records(display(ablation)), "```", "",
             "### Each seed", "", "```", format_records(per_seed, digits=4), "```", f"<!-- end {label} -->"]
    return "\n".join(lines)


def write_results(path: Path, label: str, section: str) -> None:
    """Replace this data source's section of ``path`` (or append it), keeping the others."""
    text = path.read_text() if path.exists() else "# Results: the paper's comparison on this market\n"
    begin, end = f"<!-- begin {label} -->", f"<!-- end {label} -->"
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run_cells(args: argparse.Namespace, cells: list[dict[str, Any]]) -> list[dict[str, dict[str, float]]]:
    """Every cell's result: here, one after another, or with --storage shared with the study's other workers."""
    def one(cell: dict[str, Any]) -> dict[str, dict[str, float]]:
        print(f"== {cell['kind']}, TW {cell['window']}, seed {cell['seed']}", flush=True)
        return train_and_backtest(args, cell["kind"], cell["window"], cell["seed"])

    if not args.storage:
        return [one(cell) for cell in cells]
    from clstm_ppo.tuning.grid import run_grid

    def valued(cell: dict[str, Any]) -> tuple[float, dict[str, dict[str, float]]]:
        # a trial's value: the agent's test return (a grid to share, not a search: nothing is selected on it)
        result = one(cell)
        value = result["agent"]["total_return"]
        return (value if math.isfinite(value) else -math.inf), result

    name = args.study or f"reproduce-{data_label(args.data)}"
    try:
        return run_grid(args.storage, name, cells, valued)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="sp500", help="a built-in name (sp500, dow, synthetic) or a file")
    parser.add_argument("--config", default="default", help="named config or YAML file every run starts from")
    parser.add_argument("--steps", type=int, default=300_000, help="env steps per training run")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per variant (at least 3 for the report)")
    parser.add_argument("--num-gpus", type=int, default=1, help="passed through to the trainer")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--windows", nargs="+", type=int, default=list(WINDOWS), help="TW values of the ablation")
    parser.add_argument("--out", type=Path, default=Path("checkpoints/reproduce_paper"), help="run folders")
    parser.add_argument("--results", type=Path, default=Path("docs/RESULTS.md"), help="markdown to update")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for every run, e.g. --set train.eval_every=5 (repeatable)")
    parser.add_argument("--json", action="store_true", help="print every number as one JSON object last")
    parser.add_argument("--storage", default=None, help="share the grid through this Optuna storage URL")
    parser.add_argument("--study", default=None, help="the grid's study name (default: reproduce-<data>)")
    args = parser.parse_args()
    if args.seeds < 1 or args.steps < 1:
        raise SystemExit("error: --seeds and --steps must be at least 1")
    started = datetime.datetime.now()
    default_window = load_config(args.config, args.overrides).data.window
    runs: dict[tuple[str, int], list[dict[str, dict[str, float]]]] = {}
    cells = [{"kind": kind, "window": window, "seed": seed}
             for kind, window in [(k, default_window) for k in args.kinds] + [("clstm", w) for w in args.windows
                                                                              if w != default_window]
             for seed in range(args.seeds)]
    for cell, result in zip(cells, run_cells(args, cells), strict=True):
        runs.setdefault((cell["kind"], cell["window"]), []).append(result)
    main_runs = {kind: [r["agent"] for r in runs[(kind, default_window)]] for kind in args.kinds}
    first = runs[(args.kinds[0], default_window)]
    # The benchmarks are deterministic on the same bars (random aside): each seed's copy is the same walk.
    main_runs |= {bench: [r[bench] for r in first] for bench in BENCHMARKS}
    ablation_runs = {f"clstm TW {w}": [r["agent"] for r in runs[("clstm", w)]]
                     for w in sorted({*args.windows, default_window}) if ("clstm", w) in runs}
    main_table, ablation_table = summary_rows(main_runs), summary_rows(ablation_runs)
    paired = paired_rows(main_runs, list(args.kinds))
    per_seed = [{"kind": kind, "window": window, "seed": seed, **{k: r["agent"][k] for k in METRICS}}
                for (kind, window), seeds in runs.items() for seed, r in enumerate(seeds)]
    print(format_records(display(main_table)))
    print()
    print(format_records(display(ablation_table)))
    print()
    print(format_records(paired, digits=3))
    seconds = (datetime.datetime.now() - started).total_seconds()
    write_results(args.results, data_label(args.data),
                  markdown_section(args, main_table, ablation_table, paired, per_seed, seconds))
    print(f"results written to {args.results}")
    if args.json:
        print(strict_json({"data": args.data, "steps": args.steps, "seeds": args.seeds, "main": main_table,
                           "ablation": ablation_table, "paired": paired, "per_seed": per_seed}))


if __name__ == "__main__":
    main()
