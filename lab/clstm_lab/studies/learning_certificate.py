"""Does the trainer find an edge that exists? Seeded agents trained on the planted-edge market, each walked on its
test years beside the oracle, ``best_rule`` and ``best_conditional_rule`` (scripts/studies/learning_certificate.py
writes the rows; docs/PLANTED.md).

Per run: the agent's test Sharpe over the T-bill, the share of the oracle's edge over best_rule it captures,
``(agent - best_rule) / (oracle - best_rule)``, and whether its greedy walk is a fixed rule: the rule (of the 147
unconditional ones, the oracle and the conditional pick) whose daily returns correlate most with the agent's, and
what the agent chose and how sure it was. A walk that correlates above ``FIXED_RULE_CORR`` with a rule is that rule,
whatever its Sharpe says about learning.
"""
from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clstm_lab.studies.agent_actions import closest_rule
from clstm_lab.studies.seeded_runs import run_record, train_to_budget
from clstm_ppo.agent.from_checkpoint import load_agent
from clstm_ppo.backtest.conditional import LABEL as CONDITIONAL
from clstm_ppo.backtest.conditional import conditional_policy, pick_conditional_rule
from clstm_ppo.backtest.oracle import RICH, oracle_policy, true_premium
from clstm_ppo.backtest.policies import agent_logits
from clstm_ppo.backtest.report import excess_returns, underlying_metrics
from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.rules import PICK_SPLIT, pick_from_walks, rule_family, walk_family
from clstm_ppo.backtest.scaled_rules import scaled_rule
from clstm_ppo.backtest.sharpe_difference import sharpe_difference
from clstm_ppo.backtest.walk import walk, walk_together
from clstm_ppo.config import RULE_PRIOR, WITHOUT_RULE_PRIOR, Config, PlantedConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.env import ActionSpace, Observation
from clstm_ppo.env.scaled import ScaleChoices
from clstm_ppo.pretraining.rule_prior import pick_prior

METRIC = "sharpe_excess"  # what evaluate picks best_rule by, and what the capture share is measured in
# The arms: the agent `make run` trains (the default config), the agent started from nothing and the agent started
# from the training years' best rule (cloned, then a fading pull toward it: the default run before 2026-12-04,
# whose rows say arm `prior` and its then-default settings).
ARMS: dict[str, tuple[str, ...]] = {"default": (), "scratch": WITHOUT_RULE_PRIOR, "prior": RULE_PRIOR}
DEFAULT_SWING = PlantedConfig().premium_swing
# A greedy walk whose daily returns correlate this much with a rule's makes that rule's trades on nearly every day:
# it is the rule, however it was reached.
FIXED_RULE_CORR = 0.95
TOP_ACTIONS = 3
# What a row keeps of the last update's policy (as final_<key>).
FINAL = ("agent_test_sharpe", "capture", "sell_timing", "greedy_sell_timing", "closest_corr")
# What makes a row; a row already kept is not run again. ``variant`` names the extra settings a row was trained
# with (one name per --set list, "" for none), so a tried fix is its own cell and its own run folder.
KEY = ("strength", "market_seed", "arm", "steps", "seed", "variant")


@dataclass(frozen=True)
class Cell:
    """One run of the study: an arm trained with ``seed`` to ``steps`` env steps on the planted market of
    ``market_seed`` whose premium swings ``strength`` times the default."""
    strength: float
    market_seed: int
    arm: str
    steps: int
    seed: int
    variant: str = ""

    def key(self) -> tuple[str, ...]:
        return tuple(str(v) for v in (self.strength, self.market_seed, self.arm, self.steps, self.seed,
                                      self.variant))

    def market_sets(self) -> list[str]:
        return [f"data.planted.premium_swing={self.strength * DEFAULT_SWING:g}",
                f"data.planted.seed={self.market_seed}"]

    def folder(self, out: Path) -> Path:
        return out / f"market{self.market_seed}-swing{self.strength:g}"

    def name(self) -> str:
        return f"{self.arm}{'-' + self.variant if self.variant else ''}-{self.steps}-seed{self.seed}"


def cells(strengths: list[float], market_seeds: list[int], arms: list[str], budgets: list[int],
          seeds: list[int], variant: str = "") -> Iterator[Cell]:
    """Every cell, seeds innermost: a study stopped early has each setting's first seeds."""
    for strength in strengths:
        for market_seed in market_seeds:
            for arm in arms:
                for steps in budgets:
                    for seed in seeds:
                        yield Cell(strength, market_seed, arm, steps, seed, variant)


def kept_keys(rows: Path) -> set[tuple[str, ...]]:
    """The cells a rows file already holds."""
    if not rows.exists():
        return set()
    with rows.open(newline="") as f:
        return {tuple(str(float(r[k])) if k == "strength" else r.get(k, "") for k in KEY)
                for r in csv.DictReader(f)}


def benchmarks(data: MarketData, cfg: Config, device: torch.device | str) -> dict[str, Any]:
    """The planted market's test walks that every agent of it is measured against: the 147 unconditional rules,
    best_rule and best_conditional_rule (both picked on the validation years, as evaluate picks them) and the
    oracle; and their test Sharpes over the T-bill."""
    rules = rule_family(ActionSpace.from_config(cfg.market))
    best = pick_from_walks(rules, walk_family(data, PICK_SPLIT, cfg, device), data, METRIC, PICK_SPLIT, "best_rule")
    conditional = pick_conditional_rule(data, cfg, device, METRIC)
    family = walk_family(data, "test", cfg, device)
    picked = walk_together({"oracle": oracle_policy(data, cfg, device),
                            CONDITIONAL: conditional_policy(conditional, data, cfg, device)}, data, "test", cfg,
                           device)
    return {"family": family, "oracle": picked["oracle"], "conditional_walk": picked[CONDITIONAL],
            "best_rule": best.name, "best_conditional_rule": conditional.name, "rules": len(rules),
            "conditional_rules": conditional.tried,
            "sharpe": {"best_rule": sharpe(family[best.name]), "oracle": sharpe(picked["oracle"]),
                       CONDITIONAL: sharpe(picked[CONDITIONAL])}}


def sharpe(result: WalkResult) -> float:
    """A walk's Sharpe over the T-bill, averaged over its underlyings (the planted market has one)."""
    return float(np.mean([underlying_metrics(result, s)[METRIC] for s in range(len(result.symbols))]))


def against_best_rule(result: WalkResult, rule: WalkResult) -> dict[str, float]:
    """Ledoit and Wolf's test of the agent's Sharpe less best_rule's over the same test days (docs/BACKTEST.md, "Is
    the difference real?"): a seed beats best_rule by more than luck where the interval's low end is above 0. Each
    walk's underlyings are one account that split its cash equally (the planted market has one)."""

    def excess(w: WalkResult) -> np.ndarray:
        return np.mean([excess_returns(w.equity[s], w.dates, w.rate[s]) for s in range(len(w.symbols))], axis=0)

    test = sharpe_difference(excess(result), excess(rule), periods_per_year=result.clock.periods_per_year)
    return {"vs_best_rule_difference": test.difference, "vs_best_rule_ci_low": test.ci_low,
            "vs_best_rule_ci_high": test.ci_high, "vs_best_rule_p": test.p_value}


def greedy_walk(model: Any, data: MarketData, cfg: Config, device: torch.device | str) -> tuple[WalkResult, dict]:
    """The agent's greedy walk of the test years, and what it chose: its most frequent actions with their shares,
    the median probability it gave the action it took (near 1: a sure policy; near 1/actions: a coin), and
    ``sell_timing``: whether it sells options while the hidden premium is rich. A ``scale`` agent's "sale" is its
    expected multiple of the rule's order, where the rule places one (so the oracle's timing is 1 in both modes).
    ``greedy_sell_timing`` is the same of the walk's own choices (a sale or not; the multiple chosen)."""
    scaled = scaled_rule(cfg, data, device)
    actions = ActionSpace.from_config(cfg.market) if scaled is None else ScaleChoices(scaled)
    choices: list[torch.Tensor] = []
    p_chosen: list[torch.Tensor] = []
    rows: list[torch.Tensor] = []
    p_sell: list[torch.Tensor] = []
    greedy_sell: list[torch.Tensor] = []
    if scaled is None:
        grid = [(m, e) for e in range(len(actions.expiries_days)) for m in range(len(actions.moneyness))]
        sales = [actions.sell(c, m, e) for c in (True, False) for m, e in grid] if actions.allow_short else []
        sells = torch.tensor(sales, dtype=torch.long, device=device)  # none without short options: nothing to time
    else:
        multiples = torch.tensor(scaled.multiples, device=device)

    def act(obs: Observation, state: Any) -> tuple[torch.Tensor, Any]:
        logits, state = agent_logits(model, obs, state)
        choice = logits.argmax(-1)
        probs = torch.softmax(logits.float(), -1)
        choices.append(choice)
        p_chosen.append(probs.gather(-1, choice.unsqueeze(-1)).squeeze(-1))
        rows.append(obs.row.clone())
        if scaled is not None:  # where the rule orders (the choice is free), the multiple the policy expects
            free = obs.mask.sum(-1) > 1
            p_sell.append(torch.where(free, (probs * multiples).sum(-1), torch.nan))
            greedy_sell.append(torch.where(free, multiples[choice], torch.nan))
            return choice, state
        # a sale's probability among the orders the mask allows now: full slots say nothing about timing
        allowed = obs.mask[:, sells]
        can_sell = allowed.any(-1)
        p_sell.append(torch.where(can_sell, (probs[:, sells] * allowed).sum(-1), torch.nan))
        greedy_sell.append(torch.where(can_sell, (choice.unsqueeze(-1) == sells).any(-1).float(), torch.nan))
        return choice, state

    with torch.no_grad():
        result = walk("agent", act, model.initial_state(len(data.symbols), device), data, "test", cfg, device,
                      scaled)
    chosen = Counter(torch.cat(choices).tolist())
    total = sum(chosen.values())
    mix = ", ".join(f"{actions.describe(a)} {n / total:.0%}" for a, n in chosen.most_common(TOP_ACTIONS))
    where = torch.cat(rows).cpu().numpy()
    timing = sell_timing(where, torch.cat(p_sell).cpu().numpy(), data, cfg)
    greedy = sell_timing(where, torch.cat(greedy_sell).cpu().numpy(), data, cfg)
    timing["greedy_sell_timing"] = greedy["sell_timing"]  # what the walk does: its argmax, not its probabilities
    return result, {"top_actions": mix, "p_chosen": float(torch.cat(p_chosen).median()), **timing}


def sell_timing(rows: np.ndarray, p_sell: np.ndarray, data: MarketData, cfg: Config) -> dict[str, float]:
    """The policy's mean probability of selling an option (where a sale is allowed) on the bars whose hidden
    premium is rich and on the others, and their difference: the oracle's is 1 (it always sells while rich and
    never otherwise), a policy blind to the state's 0, whatever its Sharpe."""
    rich = true_premium(data, cfg).reshape(-1)[rows] > RICH
    known = ~np.isnan(p_sell)
    on, off = p_sell[known & rich], p_sell[known & ~rich]
    mean = lambda x: float(x.mean()) if len(x) else float("nan")  # noqa: E731
    return {"p_sell_rich": mean(on), "p_sell_not_rich": mean(off), "sell_timing": mean(on) - mean(off)}


def capture(agent: float, best_rule: float, oracle: float) -> float:
    """The share of the oracle's edge over best_rule the agent earns: 0 at best_rule, 1 at the oracle (nan where
    the oracle does not beat best_rule, so there is no edge to share)."""
    edge = oracle - best_rule
    return (agent - best_rule) / edge if edge > 0 else float("nan")


def correlation(a: WalkResult, b: WalkResult) -> float:
    """Correlation of two walks' daily returns (nan where either never moves)."""
    x, y = a.daily_returns.ravel(), b.daily_returns.ravel()
    return float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 and y.std() > 0 else float("nan")


def measure(checkpoint: Path, marks: dict[str, Any] | None, device: torch.device | str,
            tested: bool = True) -> tuple[dict[str, Any], dict]:
    """A checkpoint's row: its greedy walk of the test years against ``marks`` (``benchmarks`` of its market;
    computed here, and returned for the next run of the same market, when None); with ``tested``, Ledoit and
    Wolf's test against best_rule (thousands of resamples: only for the row that keeps it)."""
    cfg, data, model = load_agent(str(checkpoint), None, [], torch.device(device))
    if marks is None:
        marks = benchmarks(data, cfg, device)
    result, chose = greedy_walk(model, data, cfg, device)
    agent = sharpe(result)
    named = {**marks["family"], "oracle": marks["oracle"], f"{CONDITIONAL}: {marks['best_conditional_rule']}":
             marks["conditional_walk"], **prior_walk(data, cfg, device, marks)}
    rule, corr = closest_rule(result, named)
    s = marks["sharpe"]
    row = {"agent_test_sharpe": agent, "best_rule_test_sharpe": s["best_rule"], "oracle_test_sharpe": s["oracle"],
           "best_conditional_test_sharpe": s[CONDITIONAL],
           "capture": capture(agent, s["best_rule"], s["oracle"]),
           "capture_vs_conditional": capture(agent, s[CONDITIONAL], s["oracle"]),
           "closest_rule": rule, "closest_corr": corr,
           "walks_a_rule": corr is not None and corr > FIXED_RULE_CORR,
           "corr_best_rule": correlation(result, marks["family"][marks["best_rule"]]),
           "corr_oracle": correlation(result, marks["oracle"]), **chose,
           **(against_best_rule(result, marks["family"][marks["best_rule"]]) if tested else {}),
           "trades": int(sum(underlying_metrics(result, s)["trades"] for s in range(len(result.symbols)))),
           "best_rule": marks["best_rule"], "best_conditional_rule": marks["best_conditional_rule"],
           "test_years": f"{data.split_dates('test')[0].date()}..{data.split_dates('test')[1].date()}"}
    return row, marks


def prior_walk(data: MarketData, cfg: Config, device: torch.device | str, marks: dict[str, Any]) -> dict:
    """A conditional prior's test walk, keyed by its name (once per market, kept in ``marks``): the gated rule a
    run cloned is no rule of the unconditional family, and an agent that walks it is walking a rule. Nothing for
    an unconditional prior (its rule is in the family) or a run without one."""
    starts_from_rule = (cfg.pretrain.enabled and cfg.pretrain.method == "rule") or cfg.agent.actions == "scale"
    if not (starts_from_rule and cfg.prior.rules == "conditional"):
        return {}
    if "prior" not in marks:
        pick = pick_prior(data, cfg, device)
        walked = walk_together({"prior": conditional_policy(pick, data, cfg, device)}, data, "test", cfg, device)
        marks["prior"] = {f"prior: {pick.name}": walked["prior"]}
    return marks["prior"]


def run_cell(cell: Cell, out: Path, threads: int | None, sets: list[str], marks: dict[str, Any] | None,
             device: torch.device | str = "cpu") -> tuple[dict[str, Any], dict]:
    """Train ``cell`` to its budget (resumably) under ``out`` and measure it; its row and its market's marks."""
    run_sets = [*ARMS[cell.arm], *cell.market_sets(), *sets,
                *([f"launch.threads_per_worker={threads}"] if threads else [])]
    train_to_budget("planted", "planted", cell.seed, cell.steps, cell.folder(out), cell.name(), run_sets)
    run = cell.folder(out) / cell.name()
    row, marks = measure(run / "best_composite.pt", marks, device)
    # The last update's policy beside the one validation picked: selection on 5 noisy years often keeps an early
    # checkpoint, which would hide what the learner ends with.
    final, marks = measure(run / "latest.pt", marks, device, tested=False)  # keeps FINAL's keys alone
    record = run_record(run)
    head = {"strength": cell.strength, "premium_swing": cell.strength * DEFAULT_SWING,
            "market_seed": cell.market_seed, "arm": cell.arm, "variant": cell.variant, "steps": cell.steps,
            "seed": cell.seed}
    return head | row | {k: record[k] for k in ("val_composite", "best_update", "train_min")} | {
        f"final_{k}": final[k] for k in FINAL} | {"sets": " ".join(sets)}, marks
