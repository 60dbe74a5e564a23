"""The few-shot protocol: k-fold over underlyings; meta-train on the other underlyings' training
years, meta-test on the held-out ones' later years (validation and test splits), every method on the
same test episodes."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from clstm_ppo.config import AgentConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.meta.accuracy_report import summarise
from clstm_ppo.meta.fewshot_baselines import majority_class, pooled_step
from clstm_ppo.meta.maml import MamlConfig, adapt_predictions, meta_step
from clstm_ppo.meta.net import FewShotNet, params_of
from clstm_ppo.meta.protonet import proto_logits, proto_step
from clstm_ppo.meta.tasks import Episodes, FewShotData, folds, sample_episodes

METHODS = ("maml", "protonet", "finetune", "scratch")
HEADLINE_STEPS = 10  # the documents' "10 adaptation steps on a new stock"


@dataclass(frozen=True)
class Protocol:
    shots: int = 5  # per class: 15 support bars, as in the documents
    n_query: int = 15
    horizon: int = 5  # k: the label reads the 5-bar (one week) forward return
    folds: int = 3
    iterations: int = 100  # meta-iterations (and pooled / ProtoNet steps) per fold
    meta_batch: int = 16
    test_episodes: int = 600  # over all folds
    steps: tuple[int, ...] = (0, 1, 2, 5, 10, 20)
    ft_lr: float = 0.1  # SGD rate of fine-tuning and of training from scratch on the support set
    train_lr: float = 1e-3  # Adam rate of pooled pretraining and ProtoNet training
    seed: int = 0
    maml: MamlConfig = field(default_factory=MamlConfig)


def _tensors(fs: FewShotData, ep: Episodes) -> tuple[torch.Tensor, ...]:
    return fs.gather(ep.support_rows), ep.support_y, fs.gather(ep.query_rows), ep.query_y


def _train(
    step: Callable,
    model: torch.nn.Module,
    fs: FewShotData,
    symbols: list[int],
    p: Protocol,
    seed: int,
) -> None:
    """``p.iterations`` steps on fresh training tasks (the same task stream for every
    method of a fold)."""
    rng = np.random.default_rng(seed)
    for _ in range(p.iterations):
        ep = sample_episodes(fs, symbols, fs.region("train"), p.meta_batch, p.shots, p.n_query, rng)
        step(model, *_tensors(fs, ep))


def run_protocol(
    data: MarketData,
    agent: AgentConfig,
    methods: tuple[str, ...],
    p: Protocol,
    log: Callable[[str], None] = print,
) -> dict[str, dict]:
    """Every method's query predictions over every fold, summarised per number of
    adaptation steps."""
    preds: dict[str, dict[int, list[np.ndarray]]] = {}
    ys: list[np.ndarray] = []
    n_features = len(data.feature_names)
    per_fold = math.ceil(p.test_episodes / p.folds)
    for fold, (train_syms, test_syms) in enumerate(folds(len(data.symbols), p.folds, p.seed)):
        fs = FewShotData(data, train_syms, p.horizon)
        test = sample_episodes(
            fs,
            test_syms,
            fs.region("later"),
            per_fold,
            p.shots,
            p.n_query,
            np.random.default_rng([p.seed, fold, 1]),
        )
        xs, ys_t, xq, yq = _tensors(fs, test)
        ys.append(yq.numpy())
        log(
            f"fold {fold + 1}/{p.folds}: meta-train {[data.symbols[s] for s in train_syms]}, "
            f"meta-test {[data.symbols[s] for s in test_syms]} on {len(test)} tasks"
        )
        stream = p.seed * 1000 + fold

        def fresh(seed: int = stream) -> FewShotNet:
            torch.manual_seed(seed)  # every method of a fold starts from the same weights
            return FewShotNet(n_features, agent)

        def record(name: str, by_steps: dict[int, torch.Tensor]) -> None:
            for s, pr in by_steps.items():
                preds.setdefault(name, {}).setdefault(s, []).append(pr.numpy())

        # the training tasks' labels alone: the majority class's constant
        rng = np.random.default_rng(stream)
        seen = [
            sample_episodes(
                fs, train_syms, fs.region("train"), p.meta_batch, p.shots, p.n_query, rng
            ).query_y.numpy()
            for _ in range(p.iterations)
        ]
        record("majority", {s: torch.full_like(yq, majority_class(seen)) for s in p.steps})
        for method in methods:
            started = time.perf_counter()
            model = fresh()
            if method == "maml":
                opt = torch.optim.Adam(model.parameters(), lr=p.maml.meta_lr)
                _train(
                    lambda m, *b, o=opt: meta_step(m, o, *b, p.maml),
                    model,
                    fs,
                    train_syms,
                    p,
                    stream,
                )
                record(
                    "maml",
                    adapt_predictions(
                        model, params_of(model), xs, ys_t, xq, list(p.steps), p.maml.inner_lr
                    ),
                )
            elif method == "protonet":
                opt = torch.optim.Adam(model.encoder.parameters(), lr=p.train_lr)
                _train(
                    lambda m, *b, o=opt: proto_step(m.encoder, o, *b),
                    model,
                    fs,
                    train_syms,
                    p,
                    stream,
                )
                with torch.no_grad():
                    guess = proto_logits(model.encoder, xs, ys_t, xq).argmax(-1)
                # no gradient steps: the same at every count
                record("protonet", {s: guess for s in p.steps})
            elif method == "finetune":
                opt = torch.optim.Adam(model.parameters(), lr=p.train_lr)
                _train(lambda m, *b, o=opt: pooled_step(m, o, *b), model, fs, train_syms, p, stream)
                out = adapt_predictions(
                    model, params_of(model), xs, ys_t, xq, list(p.steps), p.ft_lr
                )
                record("finetune", out)
                record("no_adaptation", {s: out[0] for s in p.steps})
            elif method == "scratch":
                record(
                    "scratch",
                    adapt_predictions(
                        model, params_of(model), xs, ys_t, xq, list(p.steps), p.ft_lr
                    ),
                )
            else:
                raise ValueError(f"unknown method {method!r}")
            log(f"  {method}: {time.perf_counter() - started:.1f} s")
    y_all = np.concatenate(ys)
    results: dict[str, dict] = {}
    for name, by in preds.items():
        rows = {s: summarise(y_all, np.concatenate(parts)) for s, parts in sorted(by.items())}
        head = rows[HEADLINE_STEPS] if HEADLINE_STEPS in rows else rows[max(rows)]
        results[name] = {
            **head,
            "headline_steps": HEADLINE_STEPS if HEADLINE_STEPS in rows else max(rows),
            "by_steps": rows,
        }
    results["_protocol"] = {
        "settings": dataclasses.asdict(p),
        "query_class_shares": (np.bincount(y_all.ravel(), minlength=3) / y_all.size).tolist(),
    }
    return results
