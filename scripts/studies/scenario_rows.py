"""The scenario reports' numbers as data rows, and docs/SCENARIOS.md's tables from them.

    python scripts/studies/scenario_rows.py add --report R.json --data sp500 --command "python -m ..." [--wall-s S]
        [--cpu-s S] [--note TEXT] [--rows docs/data/scenarios]
    python scripts/studies/scenario_rows.py tables [--rows docs/data/scenarios] [--data sp500] [--commit C ...]

``add`` appends one row per model of a report (``python -m clstm_ppo.scenarios report --json``) to
``<rows>/reports.jsonl`` and one per (model, regime) of a conditional model's regime blocks to
``<rows>/regimes.jsonl``, each with the commit, the machine, the date and the command that measured it. ``tables``
prints the markdown tables of the latest row of each (data, generator, model) the docs show.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

ROWS = Path(__file__).resolve().parents[2] / "docs" / "data" / "scenarios"
MODELS = ("model", "garch_t", "bootstrap", "fhs")
MARK = {True: "pass", False: "FAIL", None: "–"}


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).resolve().parent).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    gpus = torch.cuda.device_count()
    return (f"{platform.machine()}, {os.cpu_count()} cores ({cpu}), {'no GPU' if not gpus else f'{gpus} GPU'}, "
            f"torch {torch.__version__}")


def model_rows(report: dict[str, Any], base: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name in MODELS:
        r = report[name]
        like = r.get("at_held_out_length", {})
        row = {**base, "model": report["generator"] if name == "model" else name, "steps": report["steps"]
               if name == "model" else None, "judge": f"{report['judge_runs']}x{report['judge_iters']}",
               "disc": r["discriminative_score"], "strict": r["discriminative_score_strict"],
               "pred": r["predictive_score"], **{f"emd{k}": v for k, v in r["emd"].items()},
               "acf_r": r["acf_score"]["r"], "acf_abs": r["acf_score"]["abs"], "acf_sq": r["acf_score"]["sq"],
               "leverage": r["leverage_score"], "kurtosis": r["kurtosis"], "skew": r["skew"],
               "kurtosis_path_median": r.get("kurtosis_per_path_median"), "held_kurtosis":
               report["real_held_out"]["kurtosis"], "like_length": like.get("length"),
               "like_acf_abs": like.get("acf_score", {}).get("abs"), "like_leverage": like.get("leverage_score"),
               "like_kurtosis_path_median": like.get("kurtosis_per_path_median"),
               "like_held_percentile": like.get("held_out_kurtosis_percentile"),
               "held_kurtosis_series_median": report["real_held_out"].get("kurtosis_per_series_median"),
               "drift_min": min(r["drift"]["ratio_min"]), "drift_max": max(r["drift"]["ratio_max"]),
               "train_s": r["train_seconds"], "train_cpu_s": r.get("train_cpu_seconds"),
               "sample_s": r["sample_seconds"]}
        row.update({f"goal_{g}": v["pass"] for g, v in report["verdict"][name].items()})
        rows.append(row)
    return rows


def regime_rows(report: dict[str, Any], base: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for key, how in (("regimes", "held"), ("regimes_network_alone", "network alone")):
        block = report.get(key)
        if not block:
            continue
        for regime, row in block["per_regime"].items():
            rows.append({**base, "model": report["generator"], "sampling": how, "regime": regime,
                         "paths_start": block.get("paths_start", "end"),
                         "share_held": row["share_real_held_out"], "recall_real": row["recall_real"],
                         "agreement": row.get("agreement_generated"),
                         "accuracy_real": block["classifier_accuracy_real"],
                         "accuracy_generated": block["classifier_accuracy_generated"], "gap": block["gap_points"],
                         **{f"{stat}_{src}": block[stat][regime][src] for stat in ("vol", "skew")
                            for src in ("generated", "real_train", "real_held_out")}})
    return rows


def add(args: argparse.Namespace) -> None:
    report = json.loads(Path(args.report).read_text())
    base = {"commit": commit(), "machine": machine(), "date": dt.date.today().isoformat(), "data": args.data,
            "command": args.command, "wall_s": args.wall_s, "cpu_s": args.cpu_s, "note": args.note}
    args.rows.mkdir(parents=True, exist_ok=True)
    for name, rows in (("reports", model_rows(report, base)), ("regimes", regime_rows(report, base))):
        with (args.rows / f"{name}.jsonl").open("a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    print(f"{len(MODELS)} model rows from {args.report} appended to {args.rows}")


def _latest(path: Path, key: tuple[str, ...], data: str | None, commits: list[str] | None = None
            ) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    latest: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        if (data is None or row["data"] == data) and (not commits or row["commit"] in commits):
            latest[tuple(row.get(k) for k in key)] = row
    return list(latest.values())


def _num(v: Any, digits: int) -> str:
    return "" if v is None else f"{v:.{digits}f}".replace("-", "−")


def _like_for_like_goals(row: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, bool | None]:
    """acf_abs and leverage as the verdict now judges them (clstm_ppo/scenarios/verdict.py: paths as long as the
    held-out series, against GARCH-t's in the same report), for rows recorded when the 252-bar paths decided."""
    ref = next((r for r in rows if r["model"] == "garch_t" and r["data"] == row["data"]
                and r["commit"] == row["commit"] and r["judge"] == row["judge"]), None)
    if row["model"] == "garch_t" or ref is None or row.get("like_acf_abs") is None:
        return {}
    return {"acf_abs": row["like_acf_abs"] < ref["like_acf_abs"],
            "leverage": row["like_leverage"] < ref["like_leverage"]}


def tables(args: argparse.Namespace) -> None:
    head = ("| data | model | judge | disc | strict | emd1 | emd5 | emd20 | emd100 | acf \\|r\\| | leverage | "
            "kurt, pooled | kurt, held-out length | held-out percentile | drift | fit s | sample s |")
    print(head)
    print("|" + "---|" * (head.replace("\\|", "").count("|") - 1))
    for r in _latest(args.rows / "reports.jsonl", ("data", "model", "judge", "commit"), args.data, args.commit):
        pct = r.get("like_held_percentile")
        print(f"| {r['data']} | {r['model']} | {r['judge']} | {_num(r['disc'], 3)} | {_num(r['strict'], 3)} | "
              + " | ".join(_num(r[f"emd{k}"], 5) for k in ("1", "5", "20", "100"))
              + f" | {_num(r.get('like_acf_abs'), 3)} | {_num(r.get('like_leverage'), 3)} | "
              f"{_num(r['kurtosis'], 2)} | "
              f"{_num(r['like_kurtosis_path_median'], 2)} | {'' if pct is None else f'{100 * pct:.0f}%'} | "
              f"{_num(r['drift_min'], 2)}–{_num(r['drift_max'], 2)} | {_num(r['train_s'], 0)} | "
              f"{_num(r['sample_s'], 2)} |")
    print()
    goals = ("tails", "emd", "acf_abs", "leverage", "discriminative", "regimes", "drift", "budget")
    print("| data | model | " + " | ".join(goals) + " |")
    print("|" + "---|" * (len(goals) + 2))
    latest = _latest(args.rows / "reports.jsonl", ("data", "model", "judge", "commit"), args.data, args.commit)
    for r in latest:
        marks = {g: r.get(f"goal_{g}") for g in goals}
        marks.update(_like_for_like_goals(r, latest))
        print(f"| {r['data']} | {r['model']} | " + " | ".join(MARK[marks[g]] for g in goals) + " |")
    print()
    print("| data | sampling | regime | held-out share | real recall | generated agreement | vol real | vol gen "
          "| skew real | skew gen |")
    print("|" + "---|" * 10)
    for r in _latest(args.rows / "regimes.jsonl", ("data", "sampling", "regime", "commit"), args.data, args.commit):
        print(f"| {r['data']} | {r['sampling']} | {r['regime']} | {_num(100 * r['share_held'], 1)}% | "
              f"{_num(100 * r['recall_real'], 1)}% | {_num(100 * r['agreement'], 1)}% | "
              f"{_num(100 * r['vol_real_train'], 1)}% | {_num(100 * r['vol_generated'], 1)}% | "
              f"{_num(r['skew_real_train'], 2)} | {_num(r['skew_generated'], 2)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command_name", required=True)
    a = sub.add_parser("add")
    a.add_argument("--report", required=True)
    a.add_argument("--data", required=True)
    a.add_argument("--command", required=True, help="the command that wrote the report")
    a.add_argument("--wall-s", type=float, default=None)
    a.add_argument("--cpu-s", type=float, default=None, help="user + sys seconds of the report command")
    a.add_argument("--note", default="")
    a.add_argument("--rows", type=Path, default=ROWS)
    t = sub.add_parser("tables")
    t.add_argument("--rows", type=Path, default=ROWS)
    t.add_argument("--data", default=None)
    t.add_argument("--commit", action="append", help="only rows measured at this commit (repeatable)")
    args = parser.parse_args()
    add(args) if args.command_name == "add" else tables(args)


if __name__ == "__main__":
    main()
