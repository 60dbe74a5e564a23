"""Shared by the benchmark scripts: a human table, and with --json one JSON object as the last line."""
from __future__ import annotations

import json
from typing import Any


def print_table(rows: list[dict[str, Any]], as_json: bool, extra: dict[str, Any] | None = None) -> None:
    columns = list(rows[0])
    cells = [[f"{r[c]:,.3f}" if isinstance(r[c], float) else str(r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))
    for key, value in (extra or {}).items():
        print(f"{key}: {value}")
    if as_json:
        print(json.dumps({"rows": rows, **(extra or {})}))
