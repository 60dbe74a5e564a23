"""Does a model meet the goals? The report's verdict per model, and the one-line warning
a stress test prints.

The goals (docs/SCENARIOS.md, "The report and the goals"), read from the report's numbers:

- tails: the median excess kurtosis of generated paths as long as the held-out series within 30% of
  the held-out series' own (one history against histories of its length, not a pool of paths:
  stylised_facts.like_for_like);
- emd: EMD below GARCH(1,1)-t's at every lag (1, 5, 20, 100);
- acf_abs, leverage: the ACF score of |r| and the leverage score below GARCH(1,1)-t's, of
  paths as long as the held-out series (a correlation at lags up to 100 is biased towards 0 in
  a 252-bar path, so short paths of a model that clusters too much look like a long history
  that clusters less);
- discriminative: the discriminative score (released protocol) at most 0.20;
- regimes (conditional models): crash paths at least twice the bull paths' annualised volatility,
  bear and crash both more negatively skewed than bull, and the regime classifier's accuracy on
  generated windows within 10 points of its accuracy on real held-out windows;
- drift: over 1,000 bars, every 100-bar block's standard deviation of every column within a third
  and three times the training split's (no path settles to a constant or runs away);
- budget: training at most 15 minutes (this 2-core AVX2-only CPU) and 1,000 paths of 252 bars
  sampled in 5 s. The fit's time is the lesser of its wall and CPU seconds: a one-thread fit on a
  shared CPU waits for the core, so its wall seconds overstate what it takes, and its CPU seconds
  are the idle core's wall time.

A goal that does not apply (GARCH-t against itself, regimes of an unconditional model) is ``None``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clstm_ppo.scenarios.recognise import GOAL_POINTS
from clstm_ppo.scenarios.stylised_facts import held_out_kurtosis, like_for_like, stylised_facts

KURTOSIS_TOLERANCE = 0.30
DISCRIMINATIVE_MAX = 0.20
CRASH_VOL_RATIO = 2.0
DRIFT_RANGE = (1.0 / 3.0, 3.0)
TRAIN_SECONDS_MAX = 15 * 60
SAMPLE_SECONDS_MAX = 5.0
REFERENCE = "garch_t"
GOALS = ("tails", "emd", "acf_abs", "leverage", "discriminative", "regimes", "drift", "budget")


def kurtosis_range(held: float) -> tuple[float, float]:
    return held - KURTOSIS_TOLERANCE * abs(held), held + KURTOSIS_TOLERANCE * abs(held)


def _goal(ok: bool | None, text: str) -> dict[str, Any]:
    return {"pass": ok, "text": text}


def tails_goal(row: dict[str, Any], held_kurtosis: float) -> dict[str, Any]:
    """The tail goal of one model's row: its paths of the held-out length against the
    held-out kurtosis."""
    lo, hi = kurtosis_range(held_kurtosis)
    like = row["at_held_out_length"]
    k = like["kurtosis_per_path_median"]
    return _goal(
        lo <= k <= hi,
        f"kurtosis {k:.2f} (median of {like['paths']} paths of {like['length']} bars), "
        f"goal {lo:.2f}..{hi:.2f}",
    )


def emd_goal(row: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """The EMD goal of one model's row: below the reference's (GARCH-t's) row at every lag."""
    worse = [lag for lag, v in row["emd"].items() if not v < reference["emd"].get(lag, np.inf)]
    return _goal(
        not worse,
        "below GARCH-t at every lag"
        if not worse
        else f"not below GARCH-t at lag {', '.join(worse)}",
    )


def tail_goals(
    row: dict[str, Any], held_kurtosis: float, reference: dict[str, Any] | None
) -> dict[str, Any]:
    """tails, emd, acf_abs and leverage of one model's row (its stylised facts)
    against GARCH-t's row."""
    out = {"tails": tails_goal(row, held_kurtosis)}
    if reference is None:
        return {
            **out,
            "emd": _goal(None, "the reference"),
            "acf_abs": _goal(None, "the reference"),
            "leverage": _goal(None, "the reference"),
        }
    out["emd"] = emd_goal(row, reference)
    like, ref_like = row["at_held_out_length"], reference["at_held_out_length"]
    a, ra = like["acf_score"]["abs"], ref_like["acf_score"]["abs"]
    out["acf_abs"] = _goal(a < ra, f"{a:.3f} vs GARCH-t {ra:.3f} ({like['length']}-bar paths)")
    v, rv = like["leverage_score"], ref_like["leverage_score"]
    out["leverage"] = _goal(v < rv, f"{v:.3f} vs GARCH-t {rv:.3f} ({like['length']}-bar paths)")
    return out


def regime_goal(block: dict[str, Any]) -> dict[str, Any]:
    """The regime goal from the report's ``regimes`` block (recognise.py)."""
    vol, skew = block["vol"], block["skew"]
    ratio = vol["crash"]["generated"] / vol["bull"]["generated"]
    order = all(skew[n]["generated"] < skew["bull"]["generated"] for n in ("bear", "crash"))
    gap = block["gap_points"]
    ok = bool(ratio >= CRASH_VOL_RATIO and order and abs(gap) <= GOAL_POINTS)
    return _goal(
        ok,
        f"crash/bull vol {ratio:.1f}x, goal >= {CRASH_VOL_RATIO:g}; bear and crash skew below "
        f"bull: {'yes' if order else 'no'}; classifier gap {gap:+.1f} points, goal "
        f"within {GOAL_POINTS:g}",
    )


def drift(paths: np.ndarray, train_std: np.ndarray, block: int = 100) -> dict[str, Any]:
    """Standard deviation of every column in each ``block``-bar block of long paths (N, L, F), over
    the training split's; ``ok`` when all of them are within DRIFT_RANGE."""
    blocks = paths.shape[1] // block
    ratio = (
        np.stack([paths[:, b * block : (b + 1) * block].std(axis=(0, 1)) for b in range(blocks)])
        / train_std
    )
    lo, hi = DRIFT_RANGE
    return {
        "bars": int(paths.shape[1]),
        "paths": int(paths.shape[0]),
        "block": block,
        "ratio_min": ratio.min(axis=0).tolist(),
        "ratio_max": ratio.max(axis=0).tolist(),
        "ok": bool((ratio >= lo).all() and (ratio <= hi).all()),
    }


def verdict(report: dict[str, Any], names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Per model of ``names`` (report keys), every goal:
    {"pass": bool | None, "text": what was measured}."""
    real = report["real_held_out"]
    held = real.get("kurtosis_per_series_median", real["kurtosis"])
    out = {}
    for name in names:
        row = report[name]
        goals = tail_goals(row, held, None if name == REFERENCE else report[REFERENCE])
        disc = row["discriminative_score"]
        goals["discriminative"] = _goal(
            disc <= DISCRIMINATIVE_MAX, f"{disc:.3f}, goal <= {DISCRIMINATIVE_MAX:g}"
        )
        goals["regimes"] = (
            regime_goal(report["regimes"])
            if name == "model" and "regimes" in report
            else _goal(None, "no regimes")
        )
        d = row["drift"]
        goals["drift"] = _goal(
            d["ok"],
            f"block std / training std {min(d['ratio_min']):.2f}..{max(d['ratio_max']):.2f}"
            f" over {d['bars']} bars",
        )
        wall, cpu, sample = (
            row["train_seconds"],
            row.get("train_cpu_seconds", np.inf),
            row["sample_seconds"],
        )
        train = min(wall, cpu)
        ok = train <= TRAIN_SECONDS_MAX and sample <= SAMPLE_SECONDS_MAX
        how = "CPU" if cpu < wall else "wall"
        goals["budget"] = _goal(
            ok,
            f"fit {train:.1f} {how} s, goal <= {TRAIN_SECONDS_MAX}; 1,000 x 252 bars in "
            f"{sample:.2f} s, goal <= {SAMPLE_SECONDS_MAX:g}",
        )
        out[name] = goals
    return out


def format_verdict(block: dict[str, dict[str, Any]], labels: dict[str, str]) -> list[str]:
    """One line per model: every goal PASS, FAIL or n/a, with what was measured."""
    mark = {True: "PASS", False: "FAIL", None: "n/a"}
    lines = ["verdict (goals: docs/SCENARIOS.md):"]
    for name, goals in block.items():
        parts = [
            f"{g} {mark[goals[g]['pass']]}"
            + (f" ({goals[g]['text']})" if goals[g]["pass"] is not None else "")
            for g in GOALS
        ]
        lines.append(f"  {labels.get(name, name)}: " + "; ".join(parts))
    return lines


def stress_warning(
    model: Any,
    name: str,
    ret_col: int,
    held_ret: np.ndarray,
    reference: Any,
    regimes: dict[str, Any] | None,
    paths: int = 1000,
    length: int = 252,
    seed: int = 0,
) -> str | None:
    """The line ``evaluate --scenarios`` prints above its table when ``model`` fails the tail goals
    (kurtosis and EMD against ``reference``, GARCH-t, measured as the report measures them with its
    default paths, length and seed) or, for a conditional model, the regime goal (``regimes``:
    recognise.regime_report's block)."""
    row = {
        **stylised_facts(held_ret, model.sample_features(paths, length, None, seed)[..., ret_col]),
        "at_held_out_length": like_for_like(model, held_ret, ret_col, seed),
    }
    goals = {"tails": tails_goal(row, held_out_kurtosis(held_ret))}
    if reference is not None:
        goals["emd"] = emd_goal(
            row,
            stylised_facts(
                held_ret, reference.sample_features(paths, length, None, seed)[..., ret_col]
            ),
        )
    failed = [f"{g}: {goal['text']}" for g, goal in goals.items() if goal["pass"] is False]
    if regimes is not None:
        goal = regime_goal(regimes)
        if goal["pass"] is False:
            failed.append(f"regimes: {goal['text']}")
    if not failed:
        return None
    return (
        f"warning: {name} fails the scenario goals ({'; '.join(failed)}); its paths' tails or "
        "regimes are not the market's, read this stress test with that in mind (docs/SCENARIOS.md)"
    )
