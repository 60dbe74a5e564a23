"""docs/PLANTED.md's certificate table from the certificate's rows (scripts/studies/learning_certificate.py --table):
one line per setting (premium strength, market seed, arm, variant, budget), its seeds summarised."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from clstm_ppo.config import current_key

GROUP = ("strength", "market_seed", "arm", "variant", "steps")
SILENT = "output."  # where checkpoints go and how many are kept: no setting of what is learned
CAPTURED = 0.5  # the bar: a seed captures at least half of the oracle's edge over best_rule


def spread(values: list[float]) -> str:
    """Mean and range of ``values``, as a table shows them: '0.42 (0.31..0.55)', or the one value."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "—"
    if len(finite) == 1:
        return f"{finite[0]:.2f}"
    return f"{np.mean(finite):.2f} ({min(finite):.2f}..{max(finite):.2f})"


def number(row: dict[str, Any], key: str) -> float:
    """A row's value as a float (nan where the column is empty or missing: rows written before it existed)."""
    value = row.get(key, "")
    return float(value) if value not in ("", None) else float("nan")


def current_setting(assignment: str) -> str:
    """``KEY=VALUE`` as a row recorded it, with the key's current name."""
    key, _, value = assignment.partition("=")
    return f"{current_key(key)}={value}"


def certificate_table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of ``rows`` (dicts as csv.DictReader gives them), settings in first-seen order."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(str(row.get(k, "")) for k in GROUP), []).append(row)
    lines = ["| premium swing | arm | variant: its settings | env steps | seeds | agent's Sharpe | oracle's | capture "
             "≥ 0.5 | sell_timing | greedy timing | walks a rule | beats best_rule (95%) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (_, _, arm, variant, steps), members in groups.items():
        sets = " ".join(current_setting(s) for s in str(members[0].get("sets", "")).split()
                        if not current_setting(s).startswith(SILENT)) or "—"
        captured = sum(number(r, "capture") >= CAPTURED for r in members)
        walking = sum(str(r.get("walks_a_rule")) == "True" for r in members)
        tested = [number(r, "vs_best_rule_ci_low") for r in members]
        tested = [low for low in tested if math.isfinite(low)]  # rows measured before the test: none
        beating = f"{sum(low > 0 for low in tested)} of {len(tested)}" if tested else "—"
        lines.append(
            f"| {number(members[0], 'premium_swing'):g} | {arm} | {variant or '—'}: {sets} | {int(steps):,} | "
            f"{len(members)} | {spread([number(r, 'agent_test_sharpe') for r in members])} | "
            f"{number(members[0], 'oracle_test_sharpe'):.2f} | {captured} of {len(members)} | "
            f"{spread([number(r, 'sell_timing') for r in members])} | "
            f"{spread([number(r, 'greedy_sell_timing') for r in members])} | {walking} of {len(members)} | "
            f"{beating} |")
    return "\n".join(lines)
