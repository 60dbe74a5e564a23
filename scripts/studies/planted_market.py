"""Walk the planted market's known answer: the oracle (sell the 0.95 x 30-day put only while the hidden premium is
rich) against the 147 unconditional fixed rules and the conditional rules, on one planted market (by default 20
training, 5 validation and 40 test years), costs on, through the backtest's env.

    python scripts/studies/planted_market.py [--set data.planted.seed=1 ...]
        [--rows docs/data/planted/planted_market.csv]
        [--json]

Prints the oracle, best_rule and best_conditional_rule (both picked on the validation years) and the ten best
unconditional rules on test, then the summary: the oracle's test Sharpe over the T-bill less best_rule's (the
planted market's claim: at least 0.5) and less the best unconditional rule's after the fact. ``--rows`` appends
every policy's row, with the settings, commit, machine and date, to a CSV (docs/data/planted/ keeps the rows of
the defaults and of other seeds).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from clstm_lab.studies.planted_market import planted_study
from clstm_ppo.config import ConfigError
from clstm_ppo.data.errors import DataError
from clstm_ppo.tables import append_rows, print_table, provenance

SHOWN_RULES = 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting on top of the default run on the planted market (repeatable)")
    parser.add_argument("--rows", type=Path, default=None,
                        help="append every policy's row (oracle, best_rule, best_conditional_rule, the 147 rules) "
                             "with the settings, commit, machine and date to this CSV, e.g. "
                             "docs/data/planted/planted_market.csv")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:  # the walks are vectorised over the rules: a CPU walks the 40 test years in about a minute
        done = planted_study(args.overrides, "cpu")
    except (ConfigError, DataError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rules = sorted(done["rows"][3:], key=lambda r: -r["test_sharpe_excess"])[:SHOWN_RULES]
    print_table(done["rows"][:3] + rules, args.json, done["summary"])
    if args.rows is not None:
        where = {"overrides": " ".join(args.overrides) or "defaults", **provenance()}
        append_rows(args.rows, [{**row, **where} for row in done["rows"]])
        print(f"{len(done['rows'])} rows appended to {args.rows}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
