"""Per-episode accuracy, balanced accuracy and macro-F1; means with normal 95% CIs over episodes;
the table and the plot of accuracy against adaptation steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np

Z95 = 1.959964


def episode_metrics(y: np.ndarray, pred: np.ndarray, n_classes: int = 3) -> dict[str, float]:
    """One episode's query metrics. Balanced accuracy and macro-F1 average over the classes present
    in the query (a class absent there has no recall), as scikit-learn does."""
    present = [c for c in range(n_classes) if (y == c).any()]
    recalls, f1s = [], []
    for c in present:
        tp = float(((pred == c) & (y == c)).sum())
        recall = tp / float((y == c).sum())
        predicted = float((pred == c).sum())
        precision = tp / predicted if predicted else 0.0
        recalls.append(recall)
        f1s.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    return {
        "accuracy": float((y == pred).mean()),
        "balanced_accuracy": float(np.mean(recalls)),
        "macro_f1": float(np.mean(f1s)),
    }


def summarise(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """Means and 95% CIs (mean +- 1.96 standard errors) over episodes: y, pred (E, Nq)."""
    rows = [episode_metrics(a, b) for a, b in zip(y, pred, strict=True)]
    out: dict[str, float] = {"episodes": float(len(rows))}
    for key in ("accuracy", "balanced_accuracy", "macro_f1"):
        values = np.array([r[key] for r in rows])
        half = Z95 * values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
        out[key], out[f"{key}_ci"] = (
            float(values.mean()),
            [float(values.mean() - half), float(values.mean() + half)],
        )
    return out


def format_table(results: dict[str, dict]) -> str:
    """One row per method and number of adaptation steps."""
    lines = [
        f"{'method':<12}{'steps':>6}{'accuracy':>10}{'balanced acc (95% CI)':>30}{'macro-F1':>10}"
    ]
    for name, res in results.items():
        for steps, row in res["by_steps"].items():
            lo, hi = row["balanced_accuracy_ci"]
            lines.append(
                f"{name:<12}{steps:>6}{row['accuracy']:>10.3f}{row['balanced_accuracy']:>12.3f} "
                f"[{lo:.3f}, {hi:.3f}]{row['macro_f1']:>10.3f}"
            )
    return "\n".join(lines)


def plot_steps(results: dict[str, dict], path: Path) -> None:
    """Balanced accuracy with its 95% CI against the number of adaptation steps,
    one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, res in results.items():
        steps = [int(s) for s in res["by_steps"]]
        rows = list(res["by_steps"].values())
        mean = [r["balanced_accuracy"] for r in rows]
        lo = [r["balanced_accuracy_ci"][0] for r in rows]
        hi = [r["balanced_accuracy_ci"][1] for r in rows]
        ax.plot(steps, mean, marker="o", label=name)
        ax.fill_between(steps, lo, hi, alpha=0.15)
    ax.axhline(1 / 3, color="grey", linestyle="--", label="chance (1/3)")
    ax.set_xlabel("adaptation steps on the support set")
    ax.set_ylabel("balanced accuracy (query)")
    ax.set_title("3-way BUY/HOLD/SELL on held-out underlyings, later years")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
