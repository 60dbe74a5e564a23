"""CBOE's PutWrite (PUT) and BuyWrite (BXM) indices replayed in the simulated market:
practitioners' benchmarks the market can be checked against year by year (docs/MARKET.md section 5
has the comparison).

Both are direct simulations, not policies of the env: they sell options in fractional contracts,
sized as an index is, which the env's action space does not offer. They walk exactly the continuous
walk's bars (``walk_env``: its first bar to its split's last) and are priced by the env's own rules
(docs/MARKET.md section 1): Black-Scholes on the vol surface; a sale fills at the bid at a bar's
fill point (its open, or its close after a stale open) with the strike's volume proxy and every fee;
marks at mid at each close; settlement at intrinsic value at the expiry bar's close, without fees;
cash earns the rate every bar.

Schedule, as the CBOE indices roll: the first option is sold at the walk's first fill (the bar after
its first bar); each next one at the first fill point on or after the previous option's expiry,
which is the expiry bar's own close where its open is stale (sold as the old one settles, as CBOE
sells on expiry day) and the next bar's open otherwise. One option at a time at the chain's
at-the-money strike (moneyness 1.0). Expiries: ``"monthly"`` (default) lists the third Friday at
least three weeks away, the CBOE's monthly cycle (28 or 35 days on a roll); ``"30d"`` the chain's 30
calendar days (``expiry_table``), which drifts off the real cycle by a day or more each month, so
its year-by-year path is another index's.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from torch import Tensor

from clstm_ppo.backtest.result import WalkResult
from clstm_ppo.backtest.walk import walk_env
from clstm_ppo.config import Config
from clstm_ppo.data.dataset import MarketData
from clstm_ppo.env import BatchedOptionsEnv
from clstm_ppo.env.quotes import expiry_table
from clstm_ppo.market import COST_KINDS, Fill, bs_price, chain_strikes, order_fill, surface_iv
from clstm_ppo.market.costs import Ticks, fees_only, strike_volume
from clstm_ppo.market.volatility import ATM_YEARS, DAYS_PER_YEAR

EXPIRIES = ("monthly", "30d")
# a roll on expiry day (or the Monday after) lists the next month's third Friday
MONTHLY_MIN_DAYS = 21
ATM_MONEYNESS = 1.0  # CBOE takes a listed strike next to the index; the chain's 1.0 is the nearest
SHARE_COST = COST_KINDS.index("shares")  # trading the index itself (market.costs.share_cost_bps)
# What the simulation is checked against: annual returns (%) 1999-2012 as the issue that asked for
# these benchmarks quotes them: Cboe's S&P 500 PutWrite (PUT) and BuyWrite (BXM) indices and the S&P
# 500's total return (dividends reinvested). scripts/studies/cboe_benchmarks.py and
# tests/test_cboe.py compare with them.
REAL_YEARS = tuple(range(1999, 2013))
REAL_ANNUAL_RETURNS = {
    "PUT": (21.0, 13.1, -10.6, -8.6, 21.8, 9.5, 6.7, 15.2, 9.5, -26.8, 31.5, 9.0, 6.2, 8.1),
    "BXM": (21.2, 7.4, -10.9, -7.6, 19.4, 8.3, 4.2, 13.3, 6.6, -28.7, 25.9, 5.9, 5.7, 5.2),
    "SPXTR": (21.0, -9.1, -11.9, -22.1, 28.7, 10.9, 4.9, 15.8, 5.5, -37.0, 26.5, 15.1, 2.1, 16.0),
}


def putwrite(data: MarketData, split: str, cfg: Config, expiry: str = "monthly") -> WalkResult:
    """CBOE PUT: one-month at-the-money puts sold monthly, fully collateralised: the account stays
    in cash (earning the rate) and sells puts whose notional (strike x 100 a contract) equals it, so
    the cash covers every strike."""
    return _simulate("putwrite", data, split, cfg, covered=False, expiry=expiry)


def buywrite(data: MarketData, split: str, cfg: Config, expiry: str = "monthly") -> WalkResult:
    """CBOE BXM: the underlying with one-month at-the-money calls sold on every share. As the
    index's units are reset at each roll, the whole account (the settled call, premium, dividends,
    interest) is put back into shares less calls then: shares = account / (spot - call bid), paying
    ``market.costs.share_cost_bps`` on the shares traded. Dividends (the data's yield q: options are
    priced with it) are paid into cash."""
    return _simulate("buywrite", data, split, cfg, covered=True, expiry=expiry)


def monthly_expiry_table(
    dates: np.ndarray, close_time: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(T,) bar and time at which a monthly option sold on bar t expires: listed for the first
    third Friday at least MONTHLY_MIN_DAYS after t's day, it expires at the close of the last bar
    on or before that day (a Good Friday holiday: the Thursday); past the data, bar T and
    close_time[t] + the days to it."""
    days = dates.astype("datetime64[D]")
    firsts = np.arange(
        days[0].astype("datetime64[M]"), days[-1].astype("datetime64[M]") + 4
    ).astype("datetime64[D]")
    monday_based = (firsts.astype(np.int64) + 3) % 7  # 1970-01-01, day 0, was a Thursday
    third_friday = firsts + ((4 - monday_based) % 7 + 14).astype("timedelta64[D]")
    listed = third_friday[
        np.searchsorted(third_friday, days + np.timedelta64(MONTHLY_MIN_DAYS, "D"))
    ]
    index = np.searchsorted(days, listed, side="right") - 1
    beyond = listed > days[-1]
    times = np.where(
        beyond,
        close_time + (listed - days).astype(np.float64),
        close_time[np.minimum(index, len(days) - 1)],
    )
    return np.where(beyond, len(days), index), times


@dataclasses.dataclass
class _Rolls:
    """One underlying's options, one per roll: fill bar, expiry bar and time, and the
    quote at the fill."""

    fill_bar: np.ndarray  # (R,) int
    expiry_bar: np.ndarray  # (R,) int; past the walk's last bar where the option outlives it
    expiry_time: Tensor  # (R,) every tensor float64
    strike: Tensor
    mid: Tensor
    iv: Tensor
    log_k_s: Tensor
    # the strike's option-volume proxy from the decision bar's volume, as the env's fills
    volume: Tensor
    # (R,) intrinsic value per contract at the expiry bar's close (0 past the walk)
    settle: np.ndarray
    ticks: Ticks | None  # the underlying's quote grid, as the env's


def _schedule(
    first: int, last: int, expiry_bar: np.ndarray, expiry_time: np.ndarray, fill_time: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Fill bars and expiry bars of one underlying's rolls (the module docstring's schedule); the
    roll whose expiry lies past ``last`` is the walk's last and is open at its end."""
    fills, expiries, fill = [], [], first + 1
    while fill <= last:
        e = int(expiry_bar[fill])
        fills.append(fill)
        expiries.append(e)
        # its expiry bar's fill point is on or after the expiry only where it is
        # that bar's close (a stale open)
        fill = e if fill < e <= last and fill_time[e] >= expiry_time[fill] else max(e, fill) + 1
    return np.array(fills, dtype=np.int64), np.array(expiries, dtype=np.int64)


def _price_rolls(
    env: BatchedOptionsEnv,
    s: int,
    fills: np.ndarray,
    expiries: np.ndarray,
    expiry_time: Tensor,
    is_call: bool,
    cfg: Config,
) -> _Rolls:
    """Quote each roll's option at its fill point exactly as the env quotes its chain
    (``quotes._quote_chain``)."""
    m, q = cfg.market, env.quotes
    u = torch.as_tensor(fills)
    spot = q.fill_px[s, u]
    strike = chain_strikes(spot, torch.full_like(spot, ATM_MONEYNESS), m)
    years = ((expiry_time[u] - q.fill_time[s, u]) / DAYS_PER_YEAR).clamp_min(0)
    log_k_s = torch.log(strike / spot)
    iv = surface_iv(q.fill_iv[s, u], q.long_run_iv[s], log_k_s, years, m)
    flag = torch.full(spot.shape, is_call)
    mid = bs_price(spot, strike, years, q.fill_rate[s, u], q.dividend_yield[s], iv, flag, -log_k_s)
    # a fill knows t-1's volume
    volume = strike_volume(q.base_volume[s, u - 1], log_k_s, years, m.costs, ATM_YEARS)
    inside = expiries < env.split_end
    at_expiry = q.close_px[s, torch.as_tensor(np.where(inside, expiries, fills))]
    payoff = ((at_expiry - strike) * (1.0 if is_call else -1.0)).clamp_min(0) * m.multiplier
    ticks = (
        None
        if q.ticks is None
        else Ticks(float(q.ticks.small[s]), float(q.ticks.large[s]), q.ticks.boundary)
    )
    return _Rolls(
        fills,
        expiries,
        expiry_time[u],
        strike,
        mid,
        iv,
        log_k_s,
        volume,
        payoff.numpy() * inside,
        ticks,
    )


def _marks(env: BatchedOptionsEnv, s: int, rolls: _Rolls, is_call: bool, cfg: Config) -> np.ndarray:
    """(n,) mid of one contract of the option held at each close of the walk (0 where none is): the
    env's close marks (spot, vol and rate at the close; tau to the expiry bar's close)."""
    q, first, last = env.quotes, env.first_bar, env.split_end - 1
    held = np.full(last - first + 1, -1)
    for r, (u, e) in enumerate(zip(rolls.fill_bar, rolls.expiry_bar, strict=True)):
        # from its fill's close to the close before its expiry's
        held[u - first : min(e, last + 1) - first] = r
    if len(rolls.fill_bar) == 0:  # a one-bar walk sells nothing
        return np.zeros(held.shape)
    bars, live = torch.arange(first, last + 1), torch.as_tensor(held >= 0)
    r = torch.as_tensor(np.maximum(held, 0))
    spot = q.close_px[s, bars]
    # where nothing is held: any finite strike, zeroed below
    strike = torch.where(live, rolls.strike[r], spot)
    years = ((rolls.expiry_time[r] - q.close_time[bars]) / DAYS_PER_YEAR).clamp_min(0)
    log_k_s = torch.log(strike / spot)
    iv = surface_iv(q.iv_close[s, bars], q.long_run_iv[s], log_k_s, years, cfg.market)
    price = bs_price(
        spot,
        strike,
        years,
        q.rate_close[s, bars],
        q.dividend_yield[s],
        iv,
        torch.full(spot.shape, is_call),
        -log_k_s,
    )
    return (price * cfg.market.multiplier * live).numpy()


def _sell(rolls: _Rolls, r: int, contracts: float, cfg: Config) -> tuple[Fill, float]:
    """Roll r's option sold to open at the bid: the fill and the cash it brings in net of fees."""
    m = cfg.market
    fill = order_fill(
        rolls.mid[r],
        torch.tensor(contracts, dtype=torch.float64),
        True,
        rolls.iv[r],
        rolls.log_k_s[r],
        rolls.volume[r],
        m.costs,
        m.multiplier,
        rolls.ticks,
    )
    return fill, float(fill.price) * contracts * m.multiplier - float(fees_only(fill))


def _simulate(
    name: str, data: MarketData, split: str, cfg: Config, covered: bool, expiry: str
) -> WalkResult:
    if expiry not in EXPIRIES:
        raise ValueError(f"expiry must be one of {', '.join(EXPIRIES)}, got {expiry!r}")
    # float64: an index compounds thousands of bars; the env's float32
    # default would blur its pennies
    env = walk_env(
        data,
        split,
        dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, dtype="float64")),
        "cpu",
    )
    q, m, first, last = env.quotes, cfg.market, env.first_bar, env.split_end - 1
    close_time, close, rate = q.close_time.numpy(), q.close_px.numpy(), q.inputs.rate
    if expiry == "monthly":
        exp_bar, exp_time = monthly_expiry_table(data.dates.values, close_time)
    else:
        exp_bar, exp_time = (x[:, 0] for x in expiry_table(data.dates.values, close_time, [30]))
    n_sym = len(data.symbols)
    equity = np.empty((n_sym, last - first + 1))
    closed, wins, open_at_end, traded = (np.zeros(n_sym) for _ in range(4))
    costs = np.zeros((n_sym, len(COST_KINDS)))
    for s in range(n_sym):
        fills, expiries = _schedule(first, last, exp_bar, exp_time, q.fill_time[s].numpy())
        rolls = _price_rolls(env, s, fills, expiries, torch.as_tensor(exp_time), covered, cfg)
        marks = _marks(env, s, rolls, covered, cfg)
        q_div = float(q.dividend_yield[s])
        cash, shares, contracts, proceeds = cfg.env.initial_cash, 0.0, 0.0, 0.0
        equity[s, 0] = cash
        held, nxt = -1, 0  # the roll held (-1: none), the next roll to sell
        for t in range(first + 1, last + 1):
            years = (close_time[t] - close_time[t - 1]) / DAYS_PER_YEAR
            # cash earns the rate (a buywrite's small debit pays it)
            cash *= math.exp(rate[s, t - 1] * years)
            cash += shares * close[s, t - 1] * math.expm1(q_div * years)
            if held >= 0 and rolls.expiry_bar[held] == t:
                # at intrinsic value, in cash, without fees
                payout = contracts * float(rolls.settle[held])
                cash -= payout
                closed[s] += 1
                # the roll's P&L net of its costs (the option leg alone)
                wins[s] += proceeds - payout > 0
                held, contracts = -1, 0.0
            if nxt < len(fills) and fills[nxt] == t:
                spot = float(q.fill_px[s, t])
                if covered:
                    # N (spot - bid) = account: the bid at about that size
                    # (slippage hardly moves it)
                    account = cash + shares * spot
                    bid = float(_sell(rolls, nxt, account / (spot * m.multiplier), cfg)[0].price)
                    target = account / (spot - bid)
                    share_cost = abs(target - shares) * spot * m.costs.share_cost_bps * 1e-4
                    cash -= (target - shares) * spot + share_cost
                    shares = target
                    costs[s, SHARE_COST] += share_cost
                # Fractional contracts, as an index is computed: BXM one call per share,
                # PUT a notional (strike x multiplier per contract) equal to the
                # account, all in cash between puts.
                contracts = (
                    shares / m.multiplier
                    if covered
                    else cash / (float(rolls.strike[nxt]) * m.multiplier)
                )
                fill, proceeds = _sell(rolls, nxt, contracts, cfg)
                cash += proceeds
                traded[s] += float(fill.price) * contracts * m.multiplier
                costs[s] += fill.costs.numpy()
                held, nxt = nxt, nxt + 1
            equity[s, t - first] = cash + shares * close[s, t] - contracts * marks[t - first]
        # the option, and the shares of a buywrite
        open_at_end[s] = int(held >= 0) + int(shares > 0)
    return WalkResult(
        policy=name,
        symbols=list(data.symbols),
        dates=data.dates[first : last + 1],
        equity=equity,
        rate=rate[:, first : last + 1],
        closed=closed,
        wins=wins,
        open_at_end=open_at_end,
        traded=traded,
        costs=costs,
        ruin_fraction=cfg.env.ruin_fraction,
        clock=data.clock,
    )
