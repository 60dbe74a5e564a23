"""What a .pt file that does not load as data is, in one line, found without unpickling it
(docs/RELIABILITY.md, "What is safe to load").

torch.load(weights_only=True) refuses any pickled Python object that is not a tensor or a plain
value, before building it. Such a file is either one written before checkpoints were plain data
(numpy arrays inside: the migrate step converts it) or one that names some other object (a class, a
function: a crafted file can make unpickling call anything). torch lists the objects a file names
without building any of them, which tells the two apart.
"""

from __future__ import annotations

import pickletools
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

MIGRATE = "python -m clstm_ppo.migrate"


def pickle_globals(path: Path) -> list[str]:
    """The objects (``module.name``) a bare pickle names, read from its opcodes without
    running any of them."""
    names, strings = [], []
    with open(path, "rb") as fh:
        for op, arg, _ in pickletools.genops(fh):
            if isinstance(arg, str):
                strings.append(arg)
            if op.name == "GLOBAL":
                names.append(arg.replace(" ", "."))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                names.append(".".join(strings[-2:]))
    return names


def named_objects(path: Path, refusal: str) -> list[str]:
    """The Python objects (``module.name``) the pickle in ``path`` would build beyond tensors and
    plain values, read without building them: torch lists them for its own archives; a bare pickle's
    opcodes name them; else the one torch's refusal named."""
    for reader in (torch.serialization.get_unsafe_globals_in_checkpoint, pickle_globals):
        try:
            found = list(reader(path))
        except Exception:  # noqa: BLE001 (this reader cannot list them: try the next)
            continue
        if found:
            return found
    return re.findall(r"GLOBAL (\S+) was not an allowed global", refusal)[:1] or [
        "an unknown object"
    ]


def refusal_line(path: Path, what: str, refusal: str) -> str:
    """One line for a file torch refused to load as data: what it holds, and the step that
    reads it if trusted."""
    objects = named_objects(path, refusal)
    foreign = [name for name in objects if not name.startswith("numpy.")]
    if not foreign:
        return (
            f"{what} {path} holds numpy arrays, as clstm_ppo files written before checkpoints were "
            "plain data did; only an explicit step reads those (a full unpickle, which can run "
            f"code): if you trust the file, convert it once with `{MIGRATE} {path} NEW.pt "
            "--trust` and use NEW.pt"
        )
    return (
        f"{what} {path} holds a Python object no clstm_ppo file holds ({foreign[0]}) and was "
        "refused unread, since loading it could run code; if you trust its source and it is an "
        f"older clstm_ppo file, `{MIGRATE} {path} NEW.pt --trust` converts it"
    )


def as_plain_data(value: Any, where: str = "") -> Any:
    """``value`` with every numpy array made a tensor and every numpy number a Python one, so that
    torch.load's weights_only reads it back; anything else that is not a tensor or a plain value is
    a TypeError naming it, so a file that would not load as data is never written."""
    if isinstance(value, dict):
        # unchanged where nothing in it changes: a model's state dict keeps its metadata
        plain = {k: as_plain_data(v, f"{where}{k}.") for k, v in value.items()}
        return value if all(plain[k] is v for k, v in value.items()) else plain
    if isinstance(value, (list, tuple)):
        plain = [as_plain_data(v, f"{where}{i}.") for i, v in enumerate(value)]
        return (
            value if all(p is v for p, v in zip(plain, value, strict=True)) else type(value)(plain)
        )
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError(
                f"'{where.rstrip('.')}' is a numpy array of Python objects, which is not data"
            )
        return torch.from_numpy(np.ascontiguousarray(value).copy())
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (torch.Tensor, str, int, float, bool)):
        return value
    raise TypeError(f"'{where.rstrip('.')}' is a {type(value).__name__}, which is not plain data")
