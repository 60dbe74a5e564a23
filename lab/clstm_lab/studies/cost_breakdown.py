"""Where a grid's money went: trading costs against losses per fold or configuration, from each run's test walk
(scripts/studies/cost_breakdown.py prints it; docs/RESULTS.md reads it)."""
from __future__ import annotations

import datetime
import json
import statistics
from pathlib import Path
from typing import Any

import yaml

from clstm_lab.studies.across_runs import read_grid, run_folder

PICKS = {"best": "best_composite.pt", "smoothed": "best_composite_smoothed.pt"}  # reproduce_paper's two picks
GROUPS = ("fold", "config")
FIELDS = ("costs", "cost_commission", "trades", "total_return", "ruined", "max_drawdown_trough")


class GridInputError(ValueError):
    """A grid's files that cannot be read as this study needs them, phrased as one line with the fix."""


def cost_breakdown(grid: Path, runs: Path, by: str = "fold", pick: str = "best",
                   before: str | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The summary rows of ``breakdown`` over every account of the grid's runs (``grid``: what reproduce_paper.py
    --json printed, or its CSV; ``runs``: where it trained them), and what the table says beside them."""
    if before is not None:
        try:
            before = str(datetime.date.fromisoformat(before))
        except ValueError:
            raise GridInputError(f"--before {before!r} is not a date: write it as YYYY-MM-DD") from None
    if not runs.is_dir():
        raise GridInputError(f"--runs {runs} is not a folder: give reproduce_paper.py's --out / the data's name")
    rows = [a for run in read_grid(grid) for a in accounts(run, run_folder(runs, run), pick)]
    extra = {"pick": pick, "by": by, **({"before": before} if before else {}), "accounts": len(rows)}
    return breakdown(rows, by, before), extra


def accounts(run: dict[str, Any], folder: Path, pick: str) -> list[dict[str, Any]]:
    """One row per account of one run's test walk of ``pick``: ``FIELDS``, the run's keys and its initial cash."""
    report_path, config_path = folder / "test_report.json", folder / "config.yaml"
    for path in (report_path, config_path):
        if not path.is_file():
            raise GridInputError(f"{path} not found: --runs takes the folder reproduce_paper.py trained this grid "
                                 "in (its --out, then the data's name), after its walk")
    report = json.loads(report_path.read_text())
    names = [Path(c).name for c in report["checkpoints"]]
    if PICKS[pick] not in names:
        raise GridInputError(f"{report_path} walked no {PICKS[pick]}: choose --pick "
                             f"{' or '.join(p for p, f in PICKS.items() if f in names)}")
    column = "agent" if len(names) == 1 else f"agent_{names.index(PICKS[pick]) + 1}"
    cash = float(yaml.safe_load(config_path.read_text())["env"]["initial_cash"])
    rows = []
    for symbol, m in report["policies"][column].items():
        missing = [k for k in FIELDS if k not in m]
        if missing:
            raise GridInputError(f"{report_path} has no {', '.join(missing)} (walked by an older commit): walk the "
                                 "grid again with reproduce_paper.py at this commit, in a new --study")
        rows.append({**{k: m[k] for k in FIELDS}, "symbol": symbol, "cash": cash,
                     **{k: run[k] for k in ("config", "window", "seed", "fold")}})
    return rows


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None  # null in the JSON: nothing to take a median of


def breakdown(rows: list[dict[str, Any]], by: str, before: str | None) -> list[dict[str, Any]]:
    """One summary per value of ``by`` over the account rows, in the order the groups first appear."""
    out = []
    for group in dict.fromkeys(r[by] for r in rows):
        g = [r for r in rows if r[by] == group]
        ruined = [r for r in g if r["ruined"]]
        row = {by: group, "runs": len({(r["config"], r["window"], r["seed"], r["fold"]) for r in g}),
               "accounts": len(g),
               "costs_x_cash": _median([r["costs"] / r["cash"] for r in g]),
               "commission_share": _median([r["cost_commission"] / r["costs"] for r in g if r["costs"] > 0]),
               "commission_per_trade": _median([r["cost_commission"] / r["trades"] for r in g if r["trades"] > 0]),
               "trades": _median([float(r["trades"]) for r in g]),
               "ruined": len(ruined),
               "costs_over_loss": sum(r["costs"] > -r["total_return"] * r["cash"] for r in ruined)}
        if before is not None:
            row["bottomed_before"] = sum(r["max_drawdown_trough"] < before for r in ruined)
        out.append(row)
    return out
