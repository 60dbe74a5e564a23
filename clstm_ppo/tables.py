"""Plain-text tables for the console: the evaluation report, the scripts' results
and the benchmarks."""

from __future__ import annotations

import json
import math
from typing import Any


def strict_json(obj: Any, indent: int | None = None, default: Any = None) -> str:
    """``obj`` as strict JSON: a number that does not exist (NaN, an infinity) is ``null``, never
    ``NaN``, which JSON does not have and which strict parsers refuse. ``default`` turns other
    objects into JSON (e.g. str)."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        if hasattr(x, "item") and getattr(x, "ndim", None) == 0:  # a numpy or torch scalar
            return clean(x.item())
        if default is not None and not isinstance(x, (str, int, float, bool, type(None))):
            return clean(default(x))
        return x

    return json.dumps(clean(obj), allow_nan=False, indent=indent)


def format_table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    """Columns as wide as their widest cell; the first ``left`` (names) flush left,
    numbers flush right."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    return "\n".join(line(r) for r in [header, *rows])


def format_records(rows: list[dict[str, Any]], digits: int = 1, thousands: bool = False) -> str:
    """Dict rows (one key per column) as a right-aligned table, floats to ``digits`` places; None
    and NaN (a number that does not exist, e.g. profit per trade without trades) as blank."""
    spec = f"{',' if thousands else ''}.{digits}f"
    cells = [
        [
            ""
            if v is None or (isinstance(v, float) and math.isnan(v))
            else format(v, spec)
            if isinstance(v, float)
            else str(v)
            for v in r.values()
        ]
        for r in rows
    ]
    return format_table(list(rows[0]), cells, left=0)


def print_table(
    rows: list[dict[str, Any]], as_json: bool, extra: dict[str, Any] | None = None
) -> None:
    """A benchmark's result: the table and ``key: value`` lines, and with ``as_json`` one
    JSON object last."""
    print(format_records(rows, digits=3, thousands=True))
    for key, value in (extra or {}).items():
        print(f"{key}: {value}")
    if as_json:
        print(strict_json({"rows": rows, **(extra or {})}))


def provenance() -> dict[str, str]:
    """Where a row was measured: the commit (short hash, ``-dirty`` with uncommitted changes), the
    machine and the date, for every row a study or benchmark keeps under docs/data/."""
    import datetime
    import os
    import platform
    import subprocess
    from pathlib import Path

    here = Path(__file__).resolve().parent
    try:
        head = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
                cwd=here,
            ).stdout.strip()
            or "unknown"
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=here,
        ).stdout.strip()
    except OSError:
        head, dirty = "unknown", ""
    cpuinfo = Path("/proc/cpuinfo")
    cpu = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in cpuinfo.read_text().splitlines()
                if line.startswith("model name")
            ),
            "",
        )
        if cpuinfo.exists()
        else platform.processor()
    )
    return {
        "commit": head + ("-dirty" if dirty else ""),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores ({cpu})",
        "date": datetime.date.today().isoformat(),
    }


def append_rows(path: Any, rows: list[dict[str, Any]]) -> None:
    """Append ``rows`` to the CSV at ``path``, each value under its own column: the header is
    written when the file is new, and a row with a column the file lacks rewrites the file once with
    that column added (older rows empty there) instead of shifting the values under the wrong names;
    a column a row lacks stays empty in it."""
    import csv
    import os
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header: list[str] = []
    if path.exists() and path.stat().st_size > 0:
        with open(path, newline="") as fh:
            header = next(csv.reader(fh), [])
    fields = header + [key for row in rows for key in row if key not in header]
    fields = list(dict.fromkeys(fields))
    if header and fields != header:
        # widen the file: every kept row under its own names, then the new ones
        with open(path, newline="") as fh:
            kept = list(csv.DictReader(fh))
        wider = path.with_name(path.name + ".widening")
        with open(wider, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields, restval="")
            writer.writeheader()
            writer.writerows(kept)
        os.replace(wider, path)
    with open(path, "a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, restval="")
        if not header:
            writer.writeheader()
        writer.writerows(rows)
