"""The learning certificate: does the trainer find the planted market's edge? Seeded agents trained on 20 planted
years (validated on 5) and walked on its 40 test years beside the oracle, best_rule and best_conditional_rule.

    python scripts/studies/learning_certificate.py [--arms default scratch prior] [--seeds 0 1 2 ...]
        [--budgets 200000 5000000] [--strengths 0 0.5 1 2] [--market-seeds 0] [--threads 1]
        [--set KEY=VALUE ... --variant NAME] [--out checkpoints/certificate]
        [--rows docs/data/planted/certificate.csv] [--json]
    python scripts/studies/learning_certificate.py --table [--rows F.csv]   # the doc's table from the rows

Arms: ``default`` is the agent ``make run`` trains (the default config); ``scratch`` starts from nothing
(pretrain.enabled=false, prior.kl=0); ``prior`` from the training years' best rule, cloned then pulled toward
(pretrain.enabled=true, prior.kl=0.5). ``--strengths`` multiplies data.planted.premium_swing's
default (0: a constant premium, nothing to time, so nothing should be "found"). Each cell's run folder is
--out/market<k>-swing<s>/<arm>-<steps>-seed<n>, reused when finished and resumed when not; a cell whose row the
--rows file already holds is skipped, so the command can be stopped and run again. Per cell, one row: the agent's
test Sharpe over the T-bill, best_rule's and the oracle's on the same walk, the share of the oracle's edge it
captures, (agent - best_rule) / (oracle - best_rule), and whether its greedy walk is a fixed rule (the rule whose
daily returns correlate most with its own, and how much), with the commit, machine and date.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import torch

from clstm_lab.studies.certificate_table import certificate_table
from clstm_lab.studies.learning_certificate import ARMS, cells, kept_keys, run_cell
from clstm_ppo.config import ConfigError, TrainConfig, load_config
from clstm_ppo.data.errors import DataError
from clstm_ppo.tables import append_rows, print_table, provenance

SHOWN = ("strength", "arm", "variant", "steps", "seed", "agent_test_sharpe", "best_rule_test_sharpe",
         "oracle_test_sharpe", "capture", "vs_best_rule_ci_low", "vs_best_rule_ci_high", "sell_timing",
         "closest_rule", "closest_corr", "p_chosen")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=["default"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budgets", nargs="+", type=int, default=[TrainConfig().total_steps],
                        help="env steps per run (default: train.total_steps's default)")
    parser.add_argument("--strengths", nargs="+", type=float, default=[1.0],
                        help="multiples of data.planted.premium_swing's default")
    parser.add_argument("--market-seeds", nargs="+", type=int, default=[0], help="data.planted.seed values")
    parser.add_argument("--threads", type=int, default=1, help="launch.threads_per_worker (0: the trainer's choice)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting on top of every run's (repeatable)")
    parser.add_argument("--variant", default="",
                        help="a name for the --set settings (a fix tried): its runs get their own folders and rows")
    parser.add_argument("--out", type=Path, default=Path("checkpoints/certificate"))
    parser.add_argument("--rows", type=Path, default=Path("docs/data/planted/certificate.csv"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--table", action="store_true",
                        help="print docs/PLANTED.md's table from the rows in --rows instead of training")
    args = parser.parse_args(argv)
    if args.table:
        with args.rows.open(newline="") as f:
            print(certificate_table(list(csv.DictReader(f))))
        return 0
    if any(s < 0 for s in args.strengths) or any(b <= 0 for b in args.budgets) or args.threads < 0:
        parser.error("--strengths must be >= 0, --budgets > 0 and --threads >= 0")
    if bool(args.overrides) != bool(args.variant) or not all(c.isalnum() or c in "_." for c in args.variant):
        parser.error("--set needs --variant NAME (letters, digits, '_' or '.'), and --variant needs --set: the "
                     "name keeps runs of other settings apart")
    torch.set_num_threads(max(args.threads, 1))
    kept, rows, marks = kept_keys(args.rows), [], {}
    try:
        load_config("planted", args.overrides)  # a bad --set fails here, before any training
        for cell in cells(args.strengths, args.market_seeds, args.arms, args.budgets, args.seeds,
                          args.variant):
            if cell.key() in kept:
                print(f"{cell.folder(args.out).name}/{cell.name()}: kept in {args.rows}, skipped")
                continue
            market = (cell.strength, cell.market_seed)
            row, marks[market] = run_cell(cell, args.out, args.threads or None, args.overrides, marks.get(market))
            append_rows(args.rows, [{**row, **provenance()}])  # each row as it is done: a stop loses one run
            rows.append(row)
            corr = "none" if row["closest_corr"] is None else f"{row['closest_corr']:.2f}"
            print(f"{cell.folder(args.out).name}/{cell.name()}: capture {row['capture']:.2f}, closest rule "
                  f"{row['closest_rule']} (correlation {corr})", flush=True)
    except (ConfigError, DataError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if rows:
        print_table([{k: r[k] for k in SHOWN} for r in rows], args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
