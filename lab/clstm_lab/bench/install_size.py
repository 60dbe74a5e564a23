"""What each of the package's direct requirements adds to an install: the disk its dependency closure alone holds
(distributions no other requirement also needs), read from the installed distributions' RECORD files.

Measures whether a group of requirements (the tuning's Optuna and its storages, the scenarios' arch) is worth a pip
extra: docs/BENCHMARKS.md, "Install".
"""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")


def canonical(name: str) -> str:
    """PEP 503's normal form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, metadata.Distribution]:
    return {canonical(d.metadata["Name"]): d for d in metadata.distributions()}


def requirements(dist: metadata.Distribution, extras: frozenset[str] = frozenset()
                 ) -> list[tuple[str, frozenset[str]]]:
    """(name, its extras) of what ``dist`` requires unconditionally, and under ``extras``; environment markers other
    than an extra are taken as met (what a Linux install of this Python pulls)."""
    names = []
    for req in dist.requires or []:
        spec, _, marker = req.partition(";")
        wanted = re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if wanted and not set(wanted) & extras:
            continue
        match = NAME.match(spec)
        if match:
            asked = frozenset(e.strip() for e in (match.group(2) or "").split(",") if e.strip())
            names.append((canonical(match.group(1)), asked))
    return names


def closure(name: str, dists: dict[str, metadata.Distribution], extras: frozenset[str] = frozenset()) -> set[str]:
    """``name`` and every installed distribution it requires with ``extras``, transitively."""
    seen, todo = set(), [(name, extras)]
    while todo:
        here, asked = todo.pop()
        if (here, asked) in seen or here not in dists:
            continue
        seen.add((here, asked))
        todo.extend(requirements(dists[here], asked))
    return {n for n, _ in seen}


def disk_bytes(dist: metadata.Distribution) -> int:
    """Bytes of the files a distribution installed (its RECORD), those still on disk."""
    total = 0
    for file in dist.files or []:
        path = Path(dist.locate_file(file))
        if path.is_file():
            total += path.stat().st_size
    return total


def requirement_rows(package: str = "clstm_ppo", extras: frozenset[str] = frozenset(),
                     groups: dict[str, tuple[str, ...]] | None = None) -> list[dict]:
    """One row per direct requirement of ``package`` (and its ``extras``), then one per group of ``groups`` (name:
    requirements): the MB of the closure it alone needs (what leaving it out would save), the MB it shares with the
    other requirements, and its share of the whole install's MB."""
    dists = installed()
    direct = [(r, asked) for r, asked in requirements(dists[canonical(package)], extras) if r in dists]
    closures = {r: closure(r, dists, asked) for r, asked in direct}
    size = {name: disk_bytes(dist) for name, dist in dists.items()}
    whole = sum(size[n] for n in set().union(*closures.values()))

    def row(name: str, members: set[str]) -> dict:
        needs = set().union(*(closures[m] for m in members))
        others = set().union(set(), *(c for o, c in closures.items() if o not in members))
        own = needs - others
        return {"requirement": name, "own_mb": sum(size[n] for n in own) / 2**20,
                "shared_mb": sum(size[n] for n in needs & others) / 2**20,
                "own_share": sum(size[n] for n in own) / whole, "own_distributions": len(own)}

    rows = sorted((row(r, {r}) for r in closures), key=lambda x: -x["own_mb"])
    for name, members in (groups or {}).items():
        rows.append(row(name, {canonical(m) for m in members} & set(closures)))
    return rows
