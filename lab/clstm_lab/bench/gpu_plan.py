"""The GPU check's plan: which commands each part runs, in order (scripts/ops/gpu_check.py's docstring says what
each part shows; docs/BENCHMARKS.md has the figures)."""
from __future__ import annotations

from pathlib import Path

from clstm_lab.bench.gpu_steps import (
    SMOKE,
    Step,
    bench_step,
    ranks_agree_step,
    script_step,
    shared_gpu_step,
    syncs_step,
    train_step,
)

PARTS = ("ranks", "train", "env", "rollout", "checks", "scale", "update", "sb3")


def part_steps(part: str, folder: Path, seconds: float = 2.0, skip_compile: bool = False) -> list[Step]:
    """The commands of one part, in the order they run; ``seconds`` timed per bench_env/rollout row, ``folder``
    where the trainer's runs go."""
    timed = ["--seconds", str(seconds)]
    if part == "env":  # the goal: >= 10M env steps/s at >= 32,768 copies, <= 40 kernels a step compiled
        return [*(bench_step(part, "profile_env.py", ["--num-envs", "4096", *flags], f"profile_env {label} 4096")
                  for flags, label in (([], "eager"), (["--compiled"], "compiled"))),
                bench_step(part, "bench_env.py", ["--sizes", "4096", "32768", *timed], "bench_env eager"),
                *(bench_step(part, "bench_env.py", ["--sizes", "32768", *timed, flag], f"bench_env {label}")
                  for flag, label in (("--compiled", "compiled"), ("--cuda-graphs", "graphed")))]
    if part == "ranks":  # two ranks share the one lent GPU: through the command line, then compared every update
        return [shared_gpu_step(part, folder), ranks_agree_step(part)]
    if part == "train":  # the goal: >= 4M env steps/s at default sizes, >= 1.5M at paper sizes
        # Three timed updates after the warm-up: one let the update-graphs row at paper sizes go unexplained.
        both = ["default", "paper"]
        return [bench_step(part, "bench_train.py", ["--num-envs", "4096", "--updates", "3", "--settings", *sizes,
                                                    "--skip-sb3", *flags], f"bench_train {label}")
                for flags, label, sizes in (
                    ([], "eager", both), (["--compiled", "--cuda-graphs"], "compiled+graphed", both),
                    (["--compiled", "--cuda-graphs", "--update-graphs"], "update graphs too", both),
                    (["--compiled", "--cuda-graphs", "--update-graphs", "--rule-prior"], "with the rule prior",
                     ["default"]))]
    if part == "rollout":
        return [bench_step(part, "bench_rollout.py", ["--num-envs", "4096", "32768", "--paths", "eager", "compiled",
                                                      "captured", *timed], "bench_rollout")]
    if part == "sb3":  # the goal: >= 100x sb3-contrib on the same GPU at the same sizes
        # sb3-contrib's envs step on the host (~100 s an update at 256 copies): a short warm-up saves one of them.
        return [bench_step(part, "bench_train.py", ["--updates", "1", "--settings", "paper-256", "--compiled",
                                                    "--cuda-graphs", "--sb3-warmup-steps", "8"],
                           "bench_train vs sb3-contrib", timeout=1800)]
    if part == "scale":  # 65,536 copies on one GPU: one update with its evaluation and checkpoints
        one = ["--set", "train.num_envs=65536", "--total-steps", "1", "--set", "train.eval_every=1"]
        # On an H200 (2026-11-27) one update took 29.6 GB at default sizes and ~90-106 GB at paper sizes
        # (docs/BENCHMARKS.md): on an 80 GB card the paper row's error names the minibatch split that fits.
        return [train_step(part, "scale-default", folder, one, "train 65536 copies default", "default"),
                train_step(part, "scale-paper", folder, one, "train 65536 copies paper", "paper")]
    if part == "update":  # bf16: the LSTMs stay fp32
        return [bench_step(part, "bench_update.py", ["--num-envs", "4096", "--sizes", sizes, "--precision", precision,
                                                     "--paths", "eager", "static", "compiled",
                                                     "step_captured", "graphs", "captured"],
                           f"bench_update {sizes} {precision}")
                for sizes, precision in (("default", "fp32"), ("paper", "fp32"), ("default", "bf16"))]
    steps = [*(train_step(part, precision, folder, ["--set", f"launch.precision={precision}"])
               for precision in ("fp32", "bf16", "fp16"))]
    if not skip_compile:
        steps.append(train_step(part, "compiled", folder, ["--set", "launch.compile_encoder=true",
                                                           "--set", "launch.compile_loop=on",
                                                           "--set", "launch.cuda_graphs=on"]))
        # The update's loss replayed as CUDA graphs inside the trainer (launch.update_graphs: off by default until
        # this row and the "update graphs too" training row pass on a GPU).
        steps.append(train_step(part, "update-graphs", folder, ["--set", "launch.update_graphs=true"],
                                "train update graphs"))
    # A GPU-written run continues on the CPU: the env's random streams are counters in its state, on any device, and
    # a captured step's Adam takes the CPU's settings (optimizer_step.fit_saved_state) ...
    return [*steps,
            script_step(part, "resume fp32 run on cpu", [
                "-m", "clstm_ppo.train", "--config", SMOKE, "--checkpoint-dir", str(folder), "--run-name", "fp32",
                "--resume-from", "latest", "--device", "cpu", "--total-steps", "25600"]),
            # ... and back: the CPU-written checkpoint into the capturable Adam of a captured step.
            script_step(part, "resume fp32 run on cuda", [
                "-m", "clstm_ppo.train", "--config", SMOKE, "--checkpoint-dir", str(folder), "--run-name", "fp32",
                "--resume-from", "latest", "--device", "cuda", "--total-steps", "38400"]),
            script_step(part, "evaluate bf16 on cuda", [
                "-m", "clstm_ppo.evaluate", "--checkpoint", str(folder / "bf16" / "latest.pt"), "--device", "cuda",
                "--plot", str(folder / "bf16.png")]),
            syncs_step(part)]
