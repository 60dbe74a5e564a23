"""Time one MAML meta-iteration on the embedded Dow stocks (32 tasks of 15 support + 15 query bars, 5 inner SGD
steps, the default encoder: LSTM 1 64, MLP 64, 30-bar windows), second and first order, one thread; and, given a
checkpoint, ``adapt`` with K env steps (the adapted run alone, no scratch row).

    python scripts/bench/bench_fewshot.py [--tasks 32] [--repeats 5] [--adapt-checkpoint PT --adapt-data dow
        --adapt-set data.symbols=[CAT] --adapt-steps 50000] [--json]

Times are the median of --repeats iterations after one warm-up (the first vmap call traces for seconds).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

from clstm_ppo.config import load_config
from clstm_ppo.data.dataset import build_market_data
from clstm_ppo.meta.maml import MamlConfig, meta_step
from clstm_ppo.meta.net import FewShotNet
from clstm_ppo.meta.tasks import FewShotData, sample_episodes
from clstm_ppo.tables import print_table


def time_maml(tasks: int, repeats: int, first_order: bool) -> float:
    cfg = load_config(None, ["data.source=dow"])
    data = build_market_data(cfg.data)
    symbols = list(range(len(data.symbols)))
    fs = FewShotData(data, symbols, horizon=5)
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    model = FewShotNet(len(data.feature_names), cfg.agent)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    maml = MamlConfig(first_order=first_order)
    times = []
    for i in range(repeats + 1):
        ep = sample_episodes(fs, symbols, fs.region("train"), tasks, 5, 15, rng)
        started = time.perf_counter()
        meta_step(model, opt, fs.gather(ep.support_rows), ep.support_y, fs.gather(ep.query_rows), ep.query_y, maml)
        if i:  # the first call traces
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def time_adapt(args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "clstm_ppo.adapt", "--checkpoint", args.adapt_checkpoint, "--data",
               args.adapt_data, "--steps", str(args.adapt_steps), "--no-scratch", "--threads", "1", "--device", "cpu",
               "--out", out, *[f"--set={s}" for s in args.adapt_set]]
        started = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # tqdm's bar
        return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--adapt-checkpoint", default=None)
    p.add_argument("--adapt-data", default="dow")
    p.add_argument("--adapt-set", action="append", default=[])
    p.add_argument("--adapt-steps", type=int, default=50_000)
    p.add_argument("--json", action="store_true", help="also print one JSON object as the last line")
    args = p.parse_args()
    torch.set_num_threads(1)
    out = {"maml_second_order_s": time_maml(args.tasks, args.repeats, False),
           "maml_first_order_s": time_maml(args.tasks, args.repeats, True)}
    rows = [{"what": f"MAML meta-iteration, {args.tasks} tasks, 5 inner steps, second order",
             "seconds": out["maml_second_order_s"], "goal_s": 1.0},
            {"what": f"MAML meta-iteration, {args.tasks} tasks, 5 inner steps, first order",
             "seconds": out["maml_first_order_s"], "goal_s": None}]
    if args.adapt_checkpoint:
        out["adapt_s"] = time_adapt(args)
        rows.append({"what": f"adapt, K = {args.adapt_steps:,} env steps (whole command, no scratch row)",
                     "seconds": out["adapt_s"], "goal_s": 60.0})
    print_table(rows, args.json, {"threads": 1})


if __name__ == "__main__":
    main()
