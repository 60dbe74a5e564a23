"""Plain-text tables for the console: the evaluation report, the scripts' results and the benchmarks."""
from __future__ import annotations

import json
from typing import Any


def format_table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    """Columns as wide as their widest cell; the first ``left`` (names) flush left, numbers flush right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()
    return "\n".join(line(r) for r in [header, *rows])


def format_records(rows: list[dict[str, Any]], digits: int = 1, thousands: bool = False) -> str:
    """Dict rows (one key per column) as a right-aligned table, floats to ``digits`` places, None as blank."""
    spec = f"{',' if thousands else ''}.{digits}f"
    cells = [["" if v is None else format(v, spec) if isinstance(v, float) else str(v) for v in r.values()]
             for r in rows]
    return format_table(list(rows[0]), cells, left=0)


def print_table(rows: list[dict[str, Any]], as_json: bool, extra: dict[str, Any] | None = None) -> None:
    """A benchmark's result: the table and ``key: value`` lines, and with ``as_json`` one JSON object last."""
    print(format_records(rows, digits=3, thousands=True))
    for key, value in (extra or {}).items():
        print(f"{key}: {value}")
    if as_json:
        print(json.dumps({"rows": rows, **(extra or {})}))
