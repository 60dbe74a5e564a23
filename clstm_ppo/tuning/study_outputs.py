"""What a study leaves behind: the best trial as a config file that ``--config`` takes, the
parameter importances, an optimisation-history PNG and a summary (JSON and a console table)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import TrialState

from clstm_ppo.config import load_config, to_dict
from clstm_ppo.tables import format_records, strict_json
from clstm_ppo.tuning.runs import TrainSpec
from clstm_ppo.tuning.space import as_overrides

# Where a trial ran, not what it was: the best config leaves these to the command that trains it.
PER_LAUNCH = {
    "output": {"checkpoint_dir": "checkpoints", "run_name": ""},
    "launch": {"threads_per_worker": 0},
}


def best_config(spec: TrainSpec, params: dict[str, Any]) -> dict[str, Any]:
    """Every setting of the best trial's seed-0 run, as the train command resolved them
    (same precedence: the config, the data, the study's --set, then the trial's values),
    less where it ran."""
    sets = [
        *spec.overrides,
        *as_overrides(params),
        f"train.total_steps={spec.steps}",
        "train.num_episodes=0",
    ]
    if spec.data:
        sets.append(f"data.source={spec.data}")
    values = to_dict(load_config(spec.config, sets))
    values["seed"] = 0
    for section, values_here in PER_LAUNCH.items():
        values[section].update(values_here)
    return values


def write_best_yaml(path: Path, study: optuna.Study, spec: TrainSpec) -> None:
    best = study.best_trial
    seeds = best.user_attrs.get("seed_values", [])
    header = [
        f"# The best trial of study {study.study_name!r}: trial {best.number}, mean best "
        f"validation composite {best.value:.4f} over {len(seeds) or 1} seed(s) "
        f"{[round(s, 4) for s in seeds]}.",
        "# Its drawn values: " + ", ".join(as_overrides(best.params)),
        f"# Train it: python -m clstm_ppo.train --config {path.name} --run-name tuned "
        "(and report the test split with evaluate --split test, which the study never read).",
    ]
    path.write_text(
        "\n".join(header) + "\n" + yaml.safe_dump(best_config(spec, best.params), sort_keys=False)
    )


def importances(study: optuna.Study) -> tuple[dict[str, float], str]:
    """PED-ANOVA importances (numpy only, no scikit-learn) and a note when they cannot be had."""
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if len(complete) < 2:
        return {}, f"importances need at least 2 completed trials; the study has {len(complete)}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # experimental-API and few-trials warnings
            evaluator = optuna.importance.PedAnovaImportanceEvaluator()
            found = optuna.importance.get_param_importances(study, evaluator=evaluator)
    except (RuntimeError, ValueError, ZeroDivisionError) as err:
        return {}, f"importances could not be computed: {err}"
    return {k: float(v) for k, v in found.items()}, ""


def plot_history(path: Path, study: optuna.Study) -> None:
    """Each trial's value (a pruned one at its last report), and the best so far."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    done = [(t.number, t.value) for t in trials if t.state == TrialState.COMPLETE]
    pruned = [
        (t.number, t.intermediate_values[max(t.intermediate_values)])
        for t in trials
        if t.state == TrialState.PRUNED and t.intermediate_values
    ]
    if done:
        ax.scatter(*zip(*done, strict=True), label="completed", color="tab:blue")
        best, line = -math.inf, []
        for number, value in done:
            best = max(best, value)
            line.append((number, best))
        ax.step(*zip(*line, strict=True), where="post", label="best so far", color="tab:red")
    if pruned:
        ax.scatter(
            *zip(*pruned, strict=True), label="pruned (last report)", color="tab:gray", marker="x"
        )
    ax.set_xlabel("trial")
    ax.set_ylabel("mean best validation composite")
    ax.set_title(f"study {study.study_name}: optimisation history")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    if done or pruned:
        ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def trial_rows(study: optuna.Study, top: int = 10) -> list[dict[str, Any]]:
    """The best ``top`` completed trials, then how many ended in each state."""
    complete = sorted(
        study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: -t.value
    )
    rows = []
    for t in complete[:top]:
        row: dict[str, Any] = {
            "trial": t.number,
            "composite": round(t.value, 4),
            "seed_std": round(t.user_attrs.get("seed_std", 0.0), 4),
        }
        row.update(
            {
                k.rsplit(".", 1)[-1]: (f"{v:.3g}" if isinstance(v, float) else v)
                for k, v in t.params.items()
            }
        )
        rows.append(row)
    return rows


def write_report(out: Path, study: optuna.Study, spec: TrainSpec, storage: str) -> dict[str, Any]:
    """best.yaml, importances.json, history.png and summary.json in ``out``; the
    summary as a dict."""
    out.mkdir(parents=True, exist_ok=True)
    trials = study.get_trials(deepcopy=False)
    counts = {s.name.lower(): sum(t.state == s for t in trials) for s in TrialState}
    states = {name: n for name, n in counts.items() if n}
    summary: dict[str, Any] = {
        "study": study.study_name,
        "storage": storage,
        "trials": len(trials),
        "states": states,
    }
    if states.get("complete"):
        best = study.best_trial
        write_best_yaml(out / "best.yaml", study, spec)
        summary["best"] = {
            "trial": best.number,
            "value": best.value,
            "params": best.params,
            "seed_values": best.user_attrs.get("seed_values"),
            "seed_std": best.user_attrs.get("seed_std"),
            "config": str(out / "best.yaml"),
        }
    failed = [t for t in trials if t.state == TrialState.FAIL]
    if failed:
        summary["failed"] = {t.number: t.user_attrs.get("error", "") for t in failed}
    found, note = importances(study)
    (out / "importances.json").write_text(
        strict_json({"importances": found, "note": note}, indent=1)
    )
    summary["importances"], summary["importances_note"] = found, note
    plot_history(out / "history.png", study)
    summary["history_png"] = str(out / "history.png")
    (out / "summary.json").write_text(strict_json(summary, indent=1))
    return summary


def summary_text(summary: dict[str, Any], study: optuna.Study) -> str:
    lines = [
        f"study {summary['study']} ({summary['storage']}): {summary['trials']} trial(s), "
        + ", ".join(f"{n} {s}" for s, n in summary["states"].items())
    ]
    rows = trial_rows(study)
    if rows:
        lines += ["", format_records(rows, digits=4), ""]
    if "best" in summary:
        b = summary["best"]
        lines.append(
            f"best: trial {b['trial']}, composite {b['value']:.4f} -> {b['config']} "
            f"(train it with --config {b['config']})"
        )
    if summary["importances"]:
        lines.append(
            "importances: " + ", ".join(f"{k} {v:.2f}" for k, v in summary["importances"].items())
        )
    elif summary["importances_note"]:
        lines.append(summary["importances_note"])
    lines.append(f"history: {summary['history_png']}")
    return "\n".join(lines)
