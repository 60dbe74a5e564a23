"""The discrete action space.

    0                    hold
    1 .. G               buy-to-open a call at grid point g (moneyness x expiry, moneyness fastest)
    G+1 .. 2G            buy-to-open a put at grid point g
    2G+1                 close all open positions
    2G+2                 close the open position with the worst unrealised P&L
    2G+3                 close the open position with the best unrealised P&L
"""
from __future__ import annotations

from dataclasses import dataclass

from clstm_ppo.config import MarketConfig


@dataclass(frozen=True)
class ActionSpace:
    moneyness: tuple[float, ...]
    expiries_days: tuple[int, ...]

    @classmethod
    def from_config(cls, cfg: MarketConfig) -> "ActionSpace":
        return cls(tuple(cfg.moneyness), tuple(cfg.expiries_days))

    @property
    def grid_size(self) -> int:
        return len(self.moneyness) * len(self.expiries_days)

    @property
    def hold(self) -> int:
        return 0

    @property
    def close_all(self) -> int:
        return 2 * self.grid_size + 1

    @property
    def close_worst(self) -> int:
        return 2 * self.grid_size + 2

    @property
    def close_best(self) -> int:
        return 2 * self.grid_size + 3

    @property
    def n(self) -> int:
        return 2 * self.grid_size + 4

    def buy(self, is_call: bool, moneyness_index: int, expiry_index: int) -> int:
        g = expiry_index * len(self.moneyness) + moneyness_index
        return 1 + g + (0 if is_call else self.grid_size)

    def describe(self, action: int) -> str:
        """Words for action ``action``, e.g. 'buy put 0.95 x 30d'."""
        if action == self.hold:
            return "hold"
        if 1 <= action <= 2 * self.grid_size:
            g = (action - 1) % self.grid_size
            kind = "call" if action <= self.grid_size else "put"
            m, e = self.moneyness[g % len(self.moneyness)], self.expiries_days[g // len(self.moneyness)]
            return f"buy {kind} {m:g} x {e}d"
        return {self.close_all: "close all", self.close_worst: "close worst", self.close_best: "close best"}[action]
