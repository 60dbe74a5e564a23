"""The agent's checkpoint as one typed, versioned run state, and the only code
that writes or reads it.

On disk a checkpoint is a dict of tensors and plain values (dicts, lists, tuples, str, int, float,
bool, None), so ``torch.load(weights_only=True)`` reads it as data and never runs code from it
(docs/RELIABILITY.md, "What is safe to load"). numpy's random state, the one value that is not a
tensor, is stored as its key (a tensor) and its numbers. Every field is checked on load: a missing
or mistyped one is one CheckpointError line, before anything uses it. Files of version 1
(``clstm_ppo-checkpoint-v1``, numpy arrays inside) are read only by ``python -m clstm_ppo.migrate``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clstm_ppo.run_files.checkpoint import CheckpointError, atomic_save, read_torch_file
from clstm_ppo.run_files.safe_load import as_plain_data

FORMAT = "clstm_ppo-checkpoint"
VERSION = 2  # 2: numpy's random state as a tensor and numbers, every rank's state in ``ranks``
OLD_FORMAT = "clstm_ppo-checkpoint-v1"  # version 1: numpy arrays inside, an untyped dict
LOAD_FIXES = (
    "a run folder holds latest.pt, best_<metric>.pt and update_*.pt: check the path",
    "give --checkpoint another file of the run (latest.pt, a best_<metric>.pt or an update_*.pt)",
)
State = tuple[torch.Tensor, torch.Tensor]


class BadField(ValueError):
    """A field of a saved state that is missing or of the wrong type (the text names it)."""


def field_of(saved: Any, key: str, kinds: type | tuple[type, ...], where: str = "") -> Any:
    """``saved[key]`` when it is one of ``kinds`` (an int is never a bool here), else
    BadField naming it."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(saved, dict) or key not in saved:
        raise BadField(f"no field '{where}{key}'")
    value = saved[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        wanted = " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
        raise BadField(f"field '{where}{key}' is {type(value).__name__}, not {wanted}")
    return value


def tensors_of(saved: Any, key: str, where: str = "") -> dict[str, Any]:
    """A dict whose leaves (through nested dicts) are all tensors, e.g. a model's
    or an env's state."""
    value = field_of(saved, key, dict, where)
    for name, leaf in value.items():
        if isinstance(leaf, dict):
            tensors_of(value, name, f"{where}{key}.")
        elif not isinstance(leaf, torch.Tensor):
            raise BadField(f"field '{where}{key}.{name}' is {type(leaf).__name__}, not a tensor")
    return value


def numpy_rng_to_file(state: tuple) -> dict[str, Any]:
    """np.random.get_state() as a tensor and numbers: its 624 uint32 words kept bit
    for bit as int32."""
    kind, key, pos, has_gauss, cached = state
    return {
        "kind": str(kind),
        "key": torch.from_numpy(np.asarray(key, dtype=np.uint32).view(np.int32).copy()),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def numpy_rng_from_file(saved: Any, where: str) -> tuple:
    """What np.random.set_state takes, from ``numpy_rng_to_file``'s dict."""
    key = field_of(saved, "key", torch.Tensor, where)
    if key.dtype != torch.int32 or key.dim() != 1:
        raise BadField(
            f"field '{where}key' is a {key.dtype} tensor of {key.dim()} "
            "dimension(s), not int32 words"
        )
    return (
        field_of(saved, "kind", str, where),
        key.numpy().view(np.uint32).copy(),
        field_of(saved, "pos", int, where),
        field_of(saved, "has_gauss", int, where),
        float(field_of(saved, "cached_gaussian", (float, int), where)),
    )


@dataclass
class RngState:
    """One rank's random streams: torch's, numpy's (as np.random.get_state() gives it), Python's,
    the minibatch generator's, and the CUDA device's on a GPU."""

    torch: torch.Tensor
    numpy: tuple
    python: tuple
    minibatches: torch.Tensor
    cuda: torch.Tensor | None = None

    def to_file(self) -> dict[str, Any]:
        return {
            "torch": self.torch,
            "numpy": numpy_rng_to_file(self.numpy),
            "python": self.python,
            "minibatches": self.minibatches,
            "cuda": self.cuda,
        }

    @classmethod
    def from_file(cls, saved: Any, where: str) -> RngState:
        python = field_of(saved, "python", (tuple, list), where)
        if len(python) != 3 or not isinstance(python[1], (tuple, list)):
            raise BadField(
                f"field '{where}python' is not random.getstate()'s (version, words, gauss)"
            )
        return cls(
            field_of(saved, "torch", torch.Tensor, where),
            numpy_rng_from_file(field_of(saved, "numpy", dict, where), f"{where}numpy."),
            (python[0], tuple(python[1]), python[2]),
            field_of(saved, "minibatches", torch.Tensor, where),
            field_of(saved, "cuda", (torch.Tensor, type(None)), where),
        )


@dataclass
class RankState:
    """What differs between ranks at an update boundary (training/rank_state.py): random streams,
    the env copies, LSTM 2's carried state and the portfolio features the next decision reads."""

    rng: RngState
    env: dict[str, Any]
    lstm_state: State
    portfolio: torch.Tensor | None

    def to_file(self) -> dict[str, Any]:
        return {
            "rng": self.rng.to_file(),
            "env": self.env,
            "lstm_state": tuple(self.lstm_state),
            "portfolio": self.portfolio,
        }

    @classmethod
    def from_file(cls, saved: Any, where: str) -> RankState:
        lstm = field_of(saved, "lstm_state", (tuple, list), where)
        if len(lstm) != 2 or not all(isinstance(s, torch.Tensor) for s in lstm):
            raise BadField(f"field '{where}lstm_state' is not two tensors")
        # what every env state has
        field_of(tensors_of(saved, "env", where), "stats", dict, f"{where}env.")
        return cls(
            RngState.from_file(field_of(saved, "rng", dict, where), f"{where}rng."),
            saved["env"],
            (lstm[0], lstm[1]),
            field_of(saved, "portfolio", (torch.Tensor, type(None)), where),
        )


@dataclass
class RunState:
    """Everything a resume needs: model, optimizer, scaler, counters, the config, the
    normalisation statistics, the world size and copies, checkpoint selection's scores, and every
    rank's state (``ranks``, rank 0 first; empty in a checkpoint written between
    output.rank_state_every's saves)."""

    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    scaler: dict[str, Any] | None
    update: int
    global_step: int
    episodes: int
    config: dict[str, Any]
    normalizer: dict[str, Any]
    world_size: int
    num_envs: int
    best: dict[str, float] = field(default_factory=dict)
    last_eval: dict[str, float] = field(default_factory=dict)
    evals_without_best: int = 0
    recent_composites: list[float] = field(default_factory=list)
    ranks: list[RankState] = field(default_factory=list)
    version: int = VERSION

    def selection_state(self) -> dict[str, Any]:
        """What training/selection.py's Selection.load_state_dict reads."""
        return {
            "best": self.best,
            "last_eval": self.last_eval,
            "evals_without_best": self.evals_without_best,
            "recent_composites": self.recent_composites,
        }

    def to_file(self) -> dict[str, Any]:
        """The dict torch.save writes: tensors and plain values only (a numpy number among the
        scores becomes a Python one)."""
        return as_plain_data(
            {
                "format": FORMAT,
                "version": self.version,
                "model": self.model,
                "optimizer": self.optimizer,
                "scaler": self.scaler,
                "update": self.update,
                "global_step": self.global_step,
                "episodes": self.episodes,
                "config": self.config,
                "normalizer": self.normalizer,
                "world_size": self.world_size,
                "num_envs": self.num_envs,
                "selection": self.selection_state(),
                "ranks": [rank.to_file() for rank in self.ranks],
            }
        )

    @classmethod
    def from_file(cls, saved: dict[str, Any]) -> RunState:
        """The run state of a file's dict (``to_file``'s), every field checked; BadField names
        the first wrong one."""
        version = field_of(saved, "version", int)
        if version > VERSION:
            raise BadField(
                f"it is of run state version {version}, newer than this clstm_ppo's {VERSION}: "
                "upgrade clstm_ppo to read it"
            )
        optimizer = field_of(saved, "optimizer", dict)
        field_of(optimizer, "state", dict, "optimizer.")
        field_of(optimizer, "param_groups", list, "optimizer.")
        normalizer = field_of(saved, "normalizer", dict)
        for key in ("names", "mean", "std"):
            field_of(normalizer, key, (list, tuple), "normalizer.")
        selection = field_of(saved, "selection", dict)
        ranks = field_of(saved, "ranks", list)
        return cls(
            tensors_of(saved, "model"),
            optimizer,
            field_of(saved, "scaler", (dict, type(None))),
            field_of(saved, "update", int),
            field_of(saved, "global_step", int),
            field_of(saved, "episodes", int),
            field_of(saved, "config", dict),
            normalizer,
            field_of(saved, "world_size", int),
            field_of(saved, "num_envs", int),
            dict(field_of(selection, "best", dict, "selection.")),
            dict(field_of(selection, "last_eval", dict, "selection.")),
            field_of(selection, "evals_without_best", int, "selection."),
            list(field_of(selection, "recent_composites", list, "selection.")),
            [RankState.from_file(r, f"ranks[{i}].") for i, r in enumerate(ranks)],
            version,
        )

    @classmethod
    def from_version_1(cls, saved: dict[str, Any]) -> RunState:
        """A version-1 checkpoint's dict (fully unpickled: numpy arrays inside) as a run state: rank
        0's state at the top level and ranks 1.. in ``other_ranks``; fields added later take the
        values their readers assumed."""

        def rank(one: dict[str, Any]) -> dict[str, Any]:
            rng = dict(field_of(one, "rng", dict))
            rng["numpy"] = numpy_rng_to_file(field_of(rng, "numpy", tuple, "rng."))
            return {**one, "rng": {"cuda": None, **rng}, "portfolio": one.get("portfolio")}

        ranks = [rank(saved), *map(rank, saved.get("other_ranks", []))] if "env" in saved else []
        selection = {
            "best": saved.get("best"),
            "last_eval": saved.get("last_eval", {}),
            "evals_without_best": saved.get("evals_without_best", 0),
            "recent_composites": saved.get("recent_composites", []),
        }
        return cls.from_file(
            {
                **saved,
                "version": VERSION,
                "scaler": saved.get("scaler"),
                "selection": selection,
                "ranks": ranks,
            }
        )


def parse_run_state(saved: Any, path: Path) -> RunState:
    """The run state in a file's loaded contents, or one CheckpointError line saying
    what the file is."""
    if isinstance(saved, dict) and saved.get("format") == OLD_FORMAT:
        raise CheckpointError(
            f"{path} is a checkpoint of the older format {OLD_FORMAT}; convert it once with "
            f"`python -m clstm_ppo.migrate {path} NEW.pt` and use NEW.pt"
        )
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} is not a clstm_ppo checkpoint (no '{FORMAT}' marker); "
            "pass a file written by python -m clstm_ppo.train"
        )
    try:
        return RunState.from_file(saved)
    except BadField as err:
        raise CheckpointError(
            f"{path} is a damaged clstm_ppo checkpoint ({err}); use another checkpoint of the "
            "run, or retrain"
        ) from None


def load_checkpoint(
    path: str | Path, missing: str = LOAD_FIXES[0], corrupt: str = LOAD_FIXES[1]
) -> RunState:
    """The run state at ``path``, read as data (never code), or one CheckpointError line;
    ``missing`` and ``corrupt`` are the caller's fixes for a file that is not there or not whole."""
    path = Path(path)
    return parse_run_state(read_torch_file(path, "checkpoint", missing, corrupt), path)


def save_checkpoint(state: RunState, path: str | Path) -> None:
    """Write ``state`` to ``path`` whole or not at all (run_files/checkpoint.py's atomic_save)."""
    atomic_save(state.to_file(), Path(path))
