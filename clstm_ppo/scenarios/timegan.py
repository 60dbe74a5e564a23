"""TimeGAN (Yoon, Jarrett and van der Schaar, NeurIPS 2019) in plain torch.

Five GRU networks: an embedder and a recovery map bars to a latent sequence and back; a generator
maps noise to latent sequences; a supervisor predicts the next latent step from the ones before; a
discriminator tells real latent sequences from generated ones. Three phases share the step budget:

1. embedding (``phases[0]`` of the steps): embedder + recovery learn to reconstruct the bars;
2. supervised (``phases[1]``): the supervisor learns the real latent dynamics, one step ahead;
3. joint (the rest): generator + supervisor against the discriminator, with the supervised loss and
   the first two moments of the recovered bars; embedder + recovery keep reconstructing; the
   discriminator is updated only while its loss is above ``d_threshold`` (the released code's rule,
   so it does not overpower the generator).

It learns windows of the volatility filter's coded residuals (coding.py), not of bars: a path is
windows of residuals laid end to end, each from fresh noise, and the filter's recursion turns them
into bars, so run past its window a path keeps the filter's volatility dynamics instead of settling
into the GRUs' fixed point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


def moment_loss(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Mean absolute gap of the first two moments over the batch, per bar of the window and column
    (the released code's), plus the gap of the spread along a window, per column. Pooled over the
    window, a generator that draws one window for every noise, varying along it as real windows do,
    matched the moments and collapsed (every path the same 24-bar shape); over the batch alone, one
    that draws a different but nearly flat window for each noise matches them too (the residuals are
    close to i.i.d., so the supervisor's next-step prediction that every generated window goes
    through is close to a constant): docs/SCENARIOS.md."""
    across = (x_hat.std(dim=0) - x.std(dim=0)).abs().mean() + (
        x_hat.mean(dim=0) - x.mean(dim=0)
    ).abs().mean()
    return across + (x_hat.std(dim=1).mean(dim=0) - x.std(dim=1).mean(dim=0)).abs().mean()


class SeqNet(nn.Module):
    """A GRU and a linear read-out per step: (B, L, in) -> (B, L, out)."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int):
        super().__init__()
        self.gru = nn.GRU(in_dim, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.head(out)


@dataclass
class TimeGanSettings:
    hidden: int = 24
    layers: int = 2
    noise_dim: int = 8
    lr: float = 1e-3
    # weight of the discriminator's verdict on the generator's latent output before supervision
    gamma: float = 1.0
    d_threshold: float = 0.15
    # embedding and supervised shares; the joint phase has the rest
    phases: tuple[float, float] = (0.25, 0.25)


class TimeGan:
    kind = "timegan"

    def __init__(
        self,
        n_features: int,
        n_cond: int,
        settings: TimeGanSettings,
        device: torch.device,
        n_labels: int = 0,
    ):
        # unconditional, and it draws whole windows rather than one bar given its state
        del n_cond, n_labels
        s = settings
        self.settings, self.device = s, device
        self.embedder = SeqNet(n_features, s.hidden, s.hidden, s.layers).to(device)
        self.recovery = SeqNet(s.hidden, s.hidden, n_features, s.layers).to(device)
        self.generator = SeqNet(s.noise_dim, s.hidden, s.hidden, s.layers).to(device)
        self.supervisor = SeqNet(s.hidden, s.hidden, s.hidden, max(s.layers - 1, 1)).to(device)
        self.discriminator = SeqNet(s.hidden, s.hidden, 1, s.layers).to(device)

        def adam(*nets: nn.Module) -> torch.optim.Adam:
            return torch.optim.Adam([p for net in nets for p in net.parameters()], lr=s.lr)

        self.er_opt = adam(self.embedder, self.recovery)
        self.gs_opt = adam(self.generator, self.supervisor)
        self.s_opt = adam(self.supervisor)
        self.d_opt = adam(self.discriminator)
        self.total_steps = 1

    def noise(self, batch: int, length: int, gen: torch.Generator | None = None) -> torch.Tensor:
        # uniform noise, as in the released code; drawn on the CPU so a seed
        # means the same on every device
        return torch.rand(batch, length, self.settings.noise_dim, generator=gen).to(self.device)

    def phase(self, step: int) -> int:
        first, second = self.settings.phases
        if step < first * self.total_steps:
            return 0
        return 1 if step < (first + second) * self.total_steps else 2

    def batches_per_step(self, step: int) -> int:
        # joint: two generator/embedder updates, one discriminator update
        return 3 if self.phase(step) == 2 else 1

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.embedder(x))

    def _supervise(self, h: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.supervisor(h))

    def _supervised_loss(self, h: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(self._supervise(h)[:, :-1], h[:, 1:])

    def _recon(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(self.recovery(h), x)

    @staticmethod
    def _update(opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def step(self, batches: list[tuple[torch.Tensor, ...]], step: int) -> dict[str, float]:
        phase = self.phase(step)
        if phase == 0:
            x = batches[0][0]
            loss = self._recon(x, self._embed(x))
            self._update(self.er_opt, 10 * torch.sqrt(loss))
            return {"phase": 0.0, "recon_loss": loss.item()}
        if phase == 1:
            with torch.no_grad():
                h = self._embed(batches[0][0])
            loss = self._supervised_loss(h)
            self._update(self.s_opt, loss)
            return {"phase": 1.0, "supervised_loss": loss.item()}
        bce = nn.functional.binary_cross_entropy_with_logits
        for x, *_ in batches[:2]:
            b, length, _ = x.shape
            with torch.no_grad():
                h = self._embed(x)
            e_hat = torch.sigmoid(self.generator(self.noise(b, length)))
            h_hat = self._supervise(e_hat)
            y_fake, y_fake_e = self.discriminator(h_hat), self.discriminator(e_hat)
            adv = bce(y_fake, torch.ones_like(y_fake)) + self.settings.gamma * bce(
                y_fake_e, torch.ones_like(y_fake_e)
            )
            sup = self._supervised_loss(h)
            x_hat = self.recovery(h_hat)
            moments = moment_loss(x_hat, x)
            self._update(self.gs_opt, adv + 100 * torch.sqrt(sup) + 100 * moments)
            h = self._embed(x)
            recon = self._recon(x, h)
            self._update(self.er_opt, 10 * torch.sqrt(recon) + 0.1 * self._supervised_loss(h))
        x = batches[2][0]
        with torch.no_grad():
            h = self._embed(x)
            e_hat = torch.sigmoid(self.generator(self.noise(*x.shape[:2])))
            h_hat = self._supervise(e_hat)
        y_real, y_fake, y_fake_e = (self.discriminator(t) for t in (h, h_hat, e_hat))
        d_loss = (
            bce(y_real, torch.ones_like(y_real))
            + bce(y_fake, torch.zeros_like(y_fake))
            + self.settings.gamma * bce(y_fake_e, torch.zeros_like(y_fake_e))
        )
        if d_loss.item() > self.settings.d_threshold:
            self._update(self.d_opt, d_loss)
        return {
            "phase": 2.0,
            "generator_adv": adv.item(),
            "supervised_loss": sup.item(),
            "recon_loss": recon.item(),
            "moment_loss": moments.item(),
            "discriminator_loss": d_loss.item(),
        }

    @torch.no_grad()
    def sample(
        self, n: int, length: int, labels: torch.Tensor | None, gen: torch.Generator
    ) -> torch.Tensor:
        del labels
        nets = self.nets().values()
        for net in nets:
            net.eval()
        out = self.recovery(
            self._supervise(torch.sigmoid(self.generator(self.noise(n, length, gen))))
        )
        for net in nets:
            net.train()
        return out

    def nets(self) -> dict[str, nn.Module]:
        return {
            "embedder": self.embedder,
            "recovery": self.recovery,
            "generator": self.generator,
            "supervisor": self.supervisor,
            "discriminator": self.discriminator,
        }

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {
            "er_opt": self.er_opt,
            "gs_opt": self.gs_opt,
            "s_opt": self.s_opt,
            "d_opt": self.d_opt,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            name: part.state_dict() for name, part in {**self.nets(), **self.optimizers()}.items()
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, part in {**self.nets(), **self.optimizers()}.items():
            part.load_state_dict(state[name])
