"""The discrete action space (G = moneyness x expiries grid points, moneyness fastest, then expiry):

0                        hold
1 .. G                   buy-to-open a call at grid point g
G+1 .. 2G                buy-to-open a put at grid point g
2G+1 .. 3G               sell-to-open a call at grid point g       (market.allow_short)
3G+1 .. 4G               sell-to-open a put at grid point g        (market.allow_short)
next len(targets)        hold the underlying at target k of equity
                         (market.stock_targets, e.g. 0, 50, 100%)
then                     close all (options and the underlying), close the option position with
                         the worst unrealised P&L, close the one with the best
"""

from __future__ import annotations

from dataclasses import dataclass

from clstm_ppo.config import MarketConfig

HOLD = 0  # the first action of every action space


@dataclass(frozen=True)
class ActionSpace:
    moneyness: tuple[float, ...]
    expiries_days: tuple[int, ...]
    allow_short: bool = True
    stock_targets: tuple[float, ...] = ()

    @classmethod
    def from_config(cls, cfg: MarketConfig) -> "ActionSpace":
        return cls(
            tuple(cfg.moneyness),
            tuple(cfg.expiries_days),
            cfg.allow_short,
            tuple(cfg.stock_targets),
        )

    @property
    def grid_size(self) -> int:
        return len(self.moneyness) * len(self.expiries_days)

    @property
    def option_orders(self) -> int:
        """How many open-an-option actions there are: calls then puts, bought then
        (if allowed) sold."""
        return (4 if self.allow_short else 2) * self.grid_size

    @property
    def hold(self) -> int:
        return HOLD

    @property
    def first_stock(self) -> int:
        return 1 + self.option_orders

    @property
    def close_all(self) -> int:
        return self.first_stock + len(self.stock_targets)

    @property
    def close_worst(self) -> int:
        return self.close_all + 1

    @property
    def close_best(self) -> int:
        return self.close_all + 2

    @property
    def n(self) -> int:
        return self.close_all + 3

    def buy(self, is_call: bool, moneyness_index: int, expiry_index: int) -> int:
        g = expiry_index * len(self.moneyness) + moneyness_index
        return 1 + g + (0 if is_call else self.grid_size)

    def sell(self, is_call: bool, moneyness_index: int, expiry_index: int) -> int:
        if not self.allow_short:
            raise ValueError("short options are off (market.allow_short: false)")
        return self.buy(is_call, moneyness_index, expiry_index) + 2 * self.grid_size

    def stock(self, target_index: int) -> int:
        return self.first_stock + target_index

    def describe(self, action: int) -> str:
        """Words for action ``action``, e.g. 'sell put 0.95 x 30d' or 'underlying to 50%'."""
        if action == self.hold:
            return "hold"
        if 1 <= action <= self.option_orders:
            order = action - 1
            side = "buy" if order < 2 * self.grid_size else "sell"
            kind = "call" if order % (2 * self.grid_size) < self.grid_size else "put"
            g = order % self.grid_size
            m, e = (
                self.moneyness[g % len(self.moneyness)],
                self.expiries_days[g // len(self.moneyness)],
            )
            return f"{side} {kind} {m:g} x {e}d"
        if self.first_stock <= action < self.close_all:
            return f"underlying to {self.stock_targets[action - self.first_stock]:.0%}"
        return {
            self.close_all: "close all",
            self.close_worst: "close worst",
            self.close_best: "close best",
        }[action]
