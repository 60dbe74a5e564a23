"""How much memory a sample of generated paths takes, and refusing one that cannot fit
(docs/RELIABILITY.md, "Bad input")."""

from __future__ import annotations

from clstm_ppo.config import ConfigError
from clstm_ppo.device import available_memory

# A generated bar's peak footprint, on the generous side: up to 9 columns (date, symbol,
# OHLC, volume, iv, rate) of 8 bytes held about four times at once (the model's features, the
# prices rebuilt from them, the table and the writer's copy of it), plus the symbol's text
# object on every row of the table.
BYTES_PER_BAR = 9 * 8 * 4 + 100


def check_sample_size(
    paths: int, length: int, force: bool = False, flag: str = "--no-memory-check"
) -> None:
    """``paths`` x ``length`` bars fit in the memory available now, else one line saying how large
    they are and how to ask for them anyway (``flag``) or for less."""
    need = paths * length * BYTES_PER_BAR
    free = available_memory()
    if force or free is None or need <= free:
        return
    fits = max(1, free // (length * BYTES_PER_BAR))
    raise ConfigError(
        f"{paths:,} paths x {length:,} bars need about {_size(need)} of memory and {_size(free)} "
        f"is available: ask for at most {fits:,} paths of this length (or write several files with "
        f"other --seed values), or add {flag} if the estimate is wrong for this machine"
    )


def _size(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if nbytes < 1024 or unit == "PB":
            return f"{nbytes:,.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:,.1f} PB"
