"""``python -m clstm_ppo.scenarios train|sample|report``: generative models of daily bars
(docs/SCENARIOS.md).

train  --data sp500 --model wgan_gp|cgan|timegan [--out DIR] [--steps N]    writes DIR/<model>.pt
sample --checkpoint CKPT --paths N [--length L] [--regime R] --out FILE.parquet
report --checkpoint CKPT [--json F] [--plot DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from clstm_ppo.cli import add_config_arguments, check_output_path, config_from_args, run_cli
from clstm_ppo.config import ConfigError, DataConfig, first_line
from clstm_ppo.config.fields import from_dict
from clstm_ppo.config.resolve import to_dict
from clstm_ppo.data.dataset import build_market_data
from clstm_ppo.data.folds import walk_forward_folds
from clstm_ppo.device import DEVICE_CHOICES, configure_backends, pick_device
from clstm_ppo.scenarios.fit import FitOptions, fit_generator
from clstm_ppo.scenarios.generator import DEFAULT_STEPS, MODELS, check_model, load_generator
from clstm_ppo.scenarios.sample_size import check_sample_size
from clstm_ppo.tables import strict_json


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m clstm_ppo.scenarios",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--threads",
        type=_positive,
        default=1,
        help="torch CPU threads (default 1: the small GRUs gain nothing from more)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="fit a generator on the training split")
    train.add_argument(
        "--data", default=None, help="sp500, dow, synthetic, a CSV/parquet file or a folder of them"
    )
    # a plain string, checked by check_model: an unknown model is one
    # line, not argparse's usage block
    train.add_argument("--model", required=True, help=f"one of: {', '.join(MODELS)}")
    train.add_argument(
        "--out", default="scenarios", help="folder for <model>.pt (default: scenarios)"
    )
    train.add_argument(
        "--steps",
        type=_positive,
        default=None,
        help="training steps; default: " + ", ".join(f"{k} {v}" for k, v in DEFAULT_STEPS.items()),
    )
    train.add_argument(
        "--seq-len", type=_positive, default=24, help="bars per training window (TimeGAN: 24)"
    )
    train.add_argument("--batch-size", type=_positive, default=64)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", default="auto", help=f"one of: {', '.join(DEVICE_CHOICES)}")
    train.add_argument(
        "--resume", action="store_true", help="continue DIR/<model>.pt up to --steps"
    )
    train.add_argument(
        "--folds",
        type=int,
        default=0,
        help="with --fold K: fit on the training years of walk-forward "
        "fold K of N, the folds reproduce_paper.py --folds N makes (a fold's "
        "augmentation needs them)",
    )
    train.add_argument("--fold", type=int, default=None)
    train.add_argument("--wandb", action="store_true", help="log the losses to Weights & Biases")
    train.add_argument(
        "--tensorboard", default="", metavar="DIR", help="log the losses as TensorBoard scalars"
    )
    add_config_arguments(train)

    sample = sub.add_parser(
        "sample", help="write generated paths as an OHLCV(+iv) file the loader reads"
    )
    sample.add_argument("--checkpoint", required=True)
    sample.add_argument("--paths", type=_positive, required=True)
    sample.add_argument(
        "--length", type=_positive, default=252, help="bars per path (default 252: a year)"
    )
    sample.add_argument(
        "--regime", default=None, help="a regime the checkpoint was trained with (cgan)"
    )
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--out", required=True, help="FILE.parquet or FILE.csv")
    sample.add_argument(
        "--no-memory-check",
        action="store_true",
        help="sample even when the paths look larger than the memory available",
    )

    report = sub.add_parser(
        "report",
        help="quality scores beside GARCH(1,1)-t, a stationary bootstrap and filtered "
        "historical simulation, and each one's verdict on the goals",
    )
    report.add_argument("--checkpoint", required=True)
    report.add_argument("--json", default=None, metavar="F")
    report.add_argument("--plot", default=None, metavar="DIR")
    report.add_argument("--paths", type=_positive, default=1000)
    report.add_argument("--length", type=_positive, default=252)
    report.add_argument(
        "--runs", type=_positive, default=10, help="judge runs averaged (TimeGAN: 10)"
    )
    report.add_argument(
        "--judge-iters",
        type=_positive,
        default=2000,
        help="judge training iterations (TimeGAN: 2000 for the discriminative score)",
    )
    report.add_argument("--seed", type=int, default=0)
    report.add_argument(
        "--no-memory-check",
        action="store_true",
        help="run even when the paths look larger than the memory available",
    )
    return parser


def _data_config(saved: dict) -> DataConfig:
    return from_dict(DataConfig, saved)


def cmd_train(args: argparse.Namespace) -> int:
    check_model(args.model)
    cfg = config_from_args(args)
    if args.data is not None:
        cfg.data.source = args.data
    if (args.fold is None) != (not args.folds) or (args.folds and not 0 <= args.fold < args.folds):
        raise ConfigError(
            f"--fold K --folds N go together, with 0 <= K < N (got --fold {args.fold}, --folds "
            f"{args.folds})"
        )
    if args.folds:  # the fold's dates, as reproduce_paper.py gives its runs
        fold = walk_forward_folds(build_market_data(cfg.data).dates, args.folds)[args.fold]
        cfg.data.train_end, cfg.data.val_end, cfg.data.test_end = (
            fold.train_end,
            fold.val_end,
            fold.test_end,
        )
    device = pick_device(args.device)
    configure_backends(device)
    data = build_market_data(cfg.data)
    out = Path(args.out) / f"{args.model}.pt"
    opts = FitOptions(
        steps=args.steps,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        seed=args.seed,
        use_wandb=args.wandb,
        tensorboard=args.tensorboard,
    )
    started = time.perf_counter()
    gen = fit_generator(
        data, args.model, out, opts, device, resume=args.resume, data_config=to_dict(cfg.data)
    )
    print(
        f"{args.model}: {gen.step} steps on {cfg.data.source}'s training split "
        f"({gen.data['train_first']}..{gen.data['train_last']}) in "
        f"{time.perf_counter() - started:.0f} s on {device}; checkpoint {out}"
    )
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if not out.name.endswith((".parquet", ".pq", ".csv", ".csv.gz")):
        raise ConfigError(f"--out {out}: give a .parquet or .csv file name")
    check_output_path("--out", out)
    check_sample_size(args.paths, args.length, args.no_memory_check)
    gen = load_generator(args.checkpoint)
    gen.check_regime(args.regime)
    started = time.perf_counter()
    frame = gen.sample_frame(args.paths, args.length, args.regime, args.seed)
    elapsed = time.perf_counter() - started
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        frame.to_csv(out, index=False) if ".csv" in out.name else frame.to_parquet(out, index=False)
    except (OSError, ImportError) as err:
        raise ConfigError(f"--out {out}: cannot write it ({first_line(err)})") from None
    print(
        f"{args.paths} paths x {args.length} bars{f' ({args.regime})' if args.regime else ''} from "
        f"{gen.kind} in {elapsed:.2f} s -> {out}"
    )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    # arch and the judges: only when asked
    from clstm_ppo.scenarios.quality_report import build_report, format_report

    check_output_path("--json", Path(args.json) if args.json else None)
    if args.plot and Path(args.plot).exists() and not Path(args.plot).is_dir():
        raise ConfigError(
            f"--plot {args.plot} is a file; --plot names a folder for the report's figures"
        )
    check_sample_size(args.paths, args.length, args.no_memory_check)
    gen = load_generator(args.checkpoint)
    if "config" not in gen.data:
        raise ConfigError(
            f"{args.checkpoint} does not record its data settings; retrain it with this version"
        )
    data = build_market_data(_data_config(gen.data["config"]))
    report = build_report(
        gen,
        data,
        args.paths,
        args.length,
        args.runs,
        args.judge_iters,
        args.seed,
        Path(args.plot) if args.plot else None,
    )
    print(format_report(report))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(strict_json(report, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    return {"train": cmd_train, "sample": cmd_sample, "report": cmd_report}[args.command](args)


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
