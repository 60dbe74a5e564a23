"""Systematic option buying held to expiry, through the real env: what the simulated market pays a buyer.

For one split, market config and strategy, the strategy is opened on EVERY eligible decision bar t of the split
at once (one env copy per entry bar and underlying), with every cost of the env (spread, slippage, fees, the
liquidity cap), filled at t+1 as the env fills any order, held without trading until the 30-day option settles
at intrinsic value at its expiry, and measured there. An entry's P&L is its copy's equity minus the equity of a
twin copy that started on the same bar and only held cash, at the bar where the position settled: so any
interest on cash is not counted as option P&L, while the interest the premium forgoes is. Entries still open
at the split's last bar (expiry beyond the split) are flagged and left out of every summary.

Volatility regimes are terciles of the ATM implied vol at the decision bar (``MarketInputs.iv_close``); their
cut points are the 1/3 and 2/3 quantiles of that series over the TRAINING split only, whichever split is
measured. docs/MARKET.md section 2 reports the numbers (``scripts/studies/market_strategies.py``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from clstm_ppo.config import EnvConfig, MarketConfig
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.env.options_env import BatchedOptionsEnv
from clstm_ppo.market.inputs import market_inputs

# Each strategy's legs: (is_call, moneyness). Every leg is the chain's 30-day expiry, sized by the env
# (position_frac of equity each), so a straddle holds equal premium, not exactly equal contracts, per leg.
STRATEGIES: dict[str, tuple[tuple[bool, float], ...]] = {
    "atm_call": ((True, 1.00),),
    "call_105": ((True, 1.05),),
    "atm_put": ((False, 1.00),),
    "put_095": ((False, 0.95),),
    "atm_straddle": ((True, 1.00), (False, 1.00)),
}
EXPIRY_DAYS = 30
MAX_STEPS = 80  # bars; a 30-day option settles within ~23: more means positions are not settling
TERCILES = ("low", "mid", "high")


@dataclass
class Entries:
    """Per-entry arrays of one strategy on one split (entries ordered by bar, then underlying)."""
    bar: np.ndarray  # decision bar index t (the order fills at t+1)
    symbol: np.ndarray  # underlying index
    date: np.ndarray  # datetime64 date of the decision bar
    premium: np.ndarray  # $ paid for every leg, fees included (the env's entry_cost); nan where unknown
    pnl: np.ndarray  # $ at expiry, every cost included; nan for entries open at the split's end
    entry_iv: np.ndarray  # 30-day ATM implied vol at the decision bar's close
    open_at_end: np.ndarray  # bool: a leg was still open at the split's last bar (excluded)
    filled: np.ndarray  # bool: every leg was bought (the env may reject an order it cannot afford)

    @property
    def measured(self) -> np.ndarray:
        return self.filled & ~self.open_at_end

    @property
    def pnl_pct(self) -> np.ndarray:
        """P&L as % of premium per entry (nan where not measured)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.measured, 100.0 * self.pnl / self.premium, np.nan)


def entry_bars(data: MarketData, split: str) -> np.ndarray:
    """Every decision bar of ``split`` the env accepts as a start."""
    start, end = data.splits[split]
    return np.arange(start + data.window - 1, end - 1)


def _leg(data: MarketData, split: str, market: MarketConfig, is_call: bool, moneyness: float,
         bars: np.ndarray, symbols: np.ndarray) -> tuple[np.ndarray, ...]:
    """(premium, pnl, open_at_end, filled) of one option bought on each (bar, symbol) and held to expiry."""
    n = len(bars)
    env_cfg = EnvConfig(dtype="float64", episode_length=0, ruin_fraction=0.0)
    calm = dataclasses.replace(data, turbulence_threshold=float("inf"))  # no forced closes
    # Autoreset: a copy that reaches the split's last bar is started afresh instead of stepping past it (its
    # end-of-episode numbers come back in StepResult.episodes); nothing ends earlier (no ruin, no length).
    env = BatchedOptionsEnv(calm, split, market, env_cfg, 2 * n, seed=0, autoreset=True)
    starts = torch.as_tensor(np.concatenate([bars, bars]), dtype=torch.long)
    env.reset(starts=starts)
    if not np.array_equal(env.sym[:n].numpy(), symbols):
        raise RuntimeError("env copies do not trade the expected underlyings")
    action = torch.zeros(2 * n, dtype=torch.long)  # copies n..2n-1: cash-only twins
    action[:n] = env.actions.buy(is_call, market.moneyness.index(moneyness), market.expiries_days.index(EXPIRY_DAYS))
    premium, pnl = np.full(n, np.nan), np.full(n, np.nan)
    open_at_end, filled, done = np.zeros(n, bool), np.ones(n, bool), np.zeros(n, bool)
    for step in range(MAX_STEPS):
        result = env.step(action)
        action = torch.zeros_like(action)
        ended_equity, ended_open = np.full(2 * n, np.nan), np.zeros(2 * n, dtype=np.int64)
        if result.episodes is not None:
            idx = result.episodes["env"]
            ended_equity[idx] = result.episodes["return"] + env_cfg.initial_cash
            ended_open[idx] = result.episodes["open"]
        ended = ~np.isnan(ended_equity)
        if step == 0:  # the fill: read what each buying copy paid (a copy that ended here is open at the end)
            premium = np.where(ended[:n], np.nan, env.entry_cost[:, :n].sum(0).numpy())
            filled = ended[:n] | (premium > 0)
        live = env.active[:, :n].any(0).numpy()
        equity = env.equity.numpy()
        at_end = ~done & ended[:n]
        pnl[at_end] = ended_equity[:n][at_end] - ended_equity[n:][at_end]
        open_at_end[at_end] = (ended_open[:n][at_end] > 0) | (step == 0)  # no option settles on its fill bar
        settled = ~done & ~ended[:n] & ~live
        pnl[settled] = equity[:n][settled] - equity[n:][settled]
        done |= at_end | settled
        if done.all():
            break
    else:
        raise RuntimeError(f"{int((~done).sum())} positions still open after {MAX_STEPS} bars: "
                           f"a {EXPIRY_DAYS}-day option should have settled")
    pnl[open_at_end | ~filled] = np.nan
    return premium, pnl, open_at_end, filled


def run_strategies(data: MarketData, split: str, market: MarketConfig,
                   strategies: tuple[str, ...] = tuple(STRATEGIES)) -> dict[str, Entries]:
    """Open each of ``strategies`` on every eligible bar of ``split`` at once, hold each entry to expiry and
    measure it; a leg two strategies share (the straddle's call and put) is run once."""
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategy {unknown[0]!r}; choose from {', '.join(STRATEGIES)}")
    n_symbols = len(data.symbols)
    bars = np.repeat(entry_bars(data, split), n_symbols)  # copy i trades underlying i mod S
    symbols = np.tile(np.arange(n_symbols), len(bars) // n_symbols)
    legs = {leg: _leg(data, split, market, *leg, bars, symbols) for s in strategies for leg in STRATEGIES[s]}
    iv = market_inputs(data, market).iv_close[symbols, bars]
    dates = np.asarray(data.dates.values)[bars]
    out = {}
    for name in strategies:
        parts = [legs[leg] for leg in STRATEGIES[name]]
        out[name] = Entries(bar=bars, symbol=symbols, date=dates, premium=sum(p[0] for p in parts),
                            pnl=sum(p[1] for p in parts), entry_iv=iv,
                            open_at_end=np.logical_or.reduce([p[2] for p in parts]),
                            filled=np.logical_and.reduce([p[3] for p in parts]))
    return out


def held_to_expiry(data: MarketData, split: str, market: MarketConfig, strategy: str) -> Entries:
    """One strategy of ``run_strategies``."""
    return run_strategies(data, split, market, (strategy,))[strategy]


def tercile_cuts(iv_close: np.ndarray, data: MarketData) -> np.ndarray:
    """The 1/3 and 2/3 quantiles of (S, T) ``iv_close`` over the training split only (every underlying)."""
    return np.quantile(iv_close[:, slice(*data.splits["train"])], [1.0 / 3.0, 2.0 / 3.0])


def summarize(entries: Entries, cuts: np.ndarray) -> dict[str, dict[str, float]]:
    """Per regime (all, low, mid, high): ``mean_pct`` (the headline: mean of per-entry P&L % of premium),
    ``pooled_pct`` (100 x sum of P&L / sum of premium), ``count`` of measured entries and their mean entry
    ``iv_pct`` (ATM implied vol in %)."""
    regime = np.searchsorted(cuts, entries.entry_iv, side="right")  # 0 below the 1/3 cut, 2 at or above 2/3
    out = {}
    for name, keep in (("all", np.ones_like(regime, bool)), *((t, regime == i) for i, t in enumerate(TERCILES))):
        m = keep & entries.measured
        count = int(m.sum())
        out[name] = {
            "mean_pct": float(entries.pnl_pct[m].mean()) if count else float("nan"),
            "pooled_pct": float(100.0 * entries.pnl[m].sum() / entries.premium[m].sum()) if count else float("nan"),
            "count": count,
            "iv_pct": float(100.0 * entries.entry_iv[m].mean()) if count else float("nan"),
        }
    return out
