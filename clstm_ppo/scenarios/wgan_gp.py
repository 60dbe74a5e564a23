"""WGAN-GP (Gulrajani et al., 2017) of one bar given its state, optionally given a
regime label (the cGAN).

The generator maps noise, the bar's state (coding.py: the volatility filter's variance, the implied
vol's premium, and the previous bar's coded residuals) and, for the cGAN, the bar's regime to the
bar's coded residual vector; the critic scores (residual vector, state, regime) with a gradient
penalty of 10 towards unit gradient norm between real and generated rows. Paths are drawn bar by
bar, each bar's state from the bars before it (FittedGenerator.sample_features), so a path has any
length, and its volatility memory is the filter's, which a network trained on windows of a few dozen
bars could not learn for lags of 100.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


def mlp(in_dim: int, hidden: int, out_dim: int, layers: int) -> nn.Sequential:
    dims = [in_dim, *[hidden] * layers]
    parts: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:], strict=True):
        parts += [nn.Linear(a, b), nn.LeakyReLU(0.2)]
    return nn.Sequential(*parts, nn.Linear(dims[-1], out_dim))


@dataclass
class WganSettings:
    hidden: int = 64
    # hidden layers of each net: 128 x 3 cost 3.6 times as much a step on the 2-core CPU
    layers: int = 2
    noise_dim: int = 16
    n_critic: int = 5  # critic updates per generator update
    gp_weight: float = 10.0
    # the filter's recursion needs the return residual's conditional distribution right
    match_weight: float = 1.0
    match_bins: int = 4
    lr: float = 2e-4
    betas: tuple[float, float] = (0.5, 0.9)  # the WGAN-GP paper's Adam settings


def one_hot(labels: torch.Tensor | None, n_labels: int, like: torch.Tensor) -> torch.Tensor:
    """(..., n_labels) float one-hot of integer labels; (..., 0) without labels."""
    if not n_labels:
        return like.new_zeros((*like.shape[:-1], 0))
    return nn.functional.one_hot(labels, n_labels).to(like.dtype)


# coded residuals (B, L, F), states (B, L, C), labels (B, L)
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class WganGp:
    """Generator, critic and their optimisers; ``step`` does n_critic critic updates then one
    generator update."""

    kind = "wgan_gp"

    def __init__(
        self,
        n_features: int,
        n_cond: int,
        settings: WganSettings,
        device: torch.device,
        n_labels: int = 0,
    ):
        self.settings, self.device, self.n_labels = settings, device, n_labels
        s = settings
        self.generator = mlp(s.noise_dim + n_cond + n_labels, s.hidden, n_features, s.layers).to(
            device
        )
        self.critic = mlp(n_features + n_cond + n_labels, s.hidden, 1, s.layers).to(device)
        self.g_opt = torch.optim.Adam(self.generator.parameters(), lr=s.lr, betas=s.betas)
        self.c_opt = torch.optim.Adam(self.critic.parameters(), lr=s.lr, betas=s.betas)
        # set by FittedGenerator from its transform: coded rows -> the return's
        # standardised residual, in torch
        self.residual: Callable[[torch.Tensor], torch.Tensor] | None = None

    def noise(self, batch: int, gen: torch.Generator | None = None) -> torch.Tensor:
        # drawn on the CPU, where a seeded generator lives, so a seed gives
        # the same paths on every device
        return torch.randn(batch, self.settings.noise_dim, generator=gen).to(self.device)

    def generate(
        self, z: torch.Tensor, cond: torch.Tensor, labels: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.generator(torch.cat([z, cond, one_hot(labels, self.n_labels, z)], dim=-1))

    def score(
        self, x: torch.Tensor, cond: torch.Tensor, labels: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.critic(torch.cat([x, cond, one_hot(labels, self.n_labels, x)], dim=-1))[:, 0]

    def _penalty(
        self,
        real: torch.Tensor,
        fake: torch.Tensor,
        cond: torch.Tensor,
        labels: torch.Tensor | None,
    ) -> torch.Tensor:
        eps = torch.rand(real.shape[0], 1, device=self.device)
        mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
        (grad,) = torch.autograd.grad(
            self.score(mixed, cond, labels).sum(), mixed, create_graph=True
        )
        return ((grad.norm(dim=1) - 1.0) ** 2).mean()

    def _rows(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        x, cond, labels = batch
        return (
            x.reshape(-1, x.shape[-1]),
            cond.reshape(-1, cond.shape[-1]),
            labels.reshape(-1) if self.n_labels else None,
        )

    def step(self, batches: list[Batch], _step: int) -> dict[str, float]:
        """One generator update after len(batches) == n_critic critic updates, each on
        its own real batch."""
        for batch in batches:
            real, cond, labels = self._rows(batch)
            with torch.no_grad():
                fake = self.generate(self.noise(len(real)), cond, labels)
            wasserstein = (
                self.score(real, cond, labels).mean() - self.score(fake, cond, labels).mean()
            )
            loss = -wasserstein + self.settings.gp_weight * self._penalty(real, fake, cond, labels)
            self.c_opt.zero_grad(set_to_none=True)
            loss.backward()
            self.c_opt.step()
        real, cond, labels = self._rows(batches[-1])
        fake = self.generate(self.noise(len(real)), cond, labels)
        g_loss = -self.score(fake, cond, labels).mean()
        match = self._match(real, fake, cond)
        self.g_opt.zero_grad(set_to_none=True)
        (g_loss + self.settings.match_weight * match).backward()
        self.g_opt.step()
        return {
            "critic_loss": loss.item(),
            "wasserstein": wasserstein.item(),
            "generator_loss": g_loss.item(),
            "match_loss": match.item(),
        }

    def _match(self, real: torch.Tensor, fake: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Squared Wasserstein-2 distance between the generated and real return residuals z within
        bins of the state's filtered variance (cond column 0; fake and real rows share their states,
        so the bins hold as many of each). A path feeds its own residuals back into the variance
        recursion, so a few percent too much E[z^2] at high variance makes the volatility run away
        (the S&P 500 filter's persistence is 0.993), and the critic alone left errors of 10-70%
        there; matching the sorted samples fixes the whole conditional distribution, tails included,
        where matching two moments let the generator collapse to a constant."""
        if self.residual is None or not self.settings.match_weight:
            return fake.new_zeros(())
        zr, zf = self.residual(real), self.residual(fake)
        edges = torch.quantile(cond[:, 0], torch.linspace(0, 1, self.settings.match_bins + 1)[1:-1])
        bins = torch.bucketize(cond[:, 0].contiguous(), edges)
        out = fake.new_zeros(())
        for b in range(self.settings.match_bins):
            m = bins == b
            if m.any():
                out = out + ((torch.sort(zf[m]).values - torch.sort(zr[m]).values) ** 2).mean()
        return out / self.settings.match_bins

    def batches_per_step(self, _step: int) -> int:
        return self.settings.n_critic

    @torch.no_grad()
    def draw(
        self, cond: torch.Tensor, labels: torch.Tensor | None, gen: torch.Generator
    ) -> torch.Tensor:
        """One bar's coded residuals (N, F) for N paths in states ``cond`` (N, C)."""
        return self.generate(
            self.noise(len(cond), gen),
            cond.to(self.device),
            None if labels is None else labels.to(self.device),
        )

    def nets(self) -> dict[str, nn.Module]:
        return {"generator": self.generator, "critic": self.critic}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"g_opt": self.g_opt, "c_opt": self.c_opt}

    def state_dict(self) -> dict[str, Any]:
        return {
            name: part.state_dict() for name, part in {**self.nets(), **self.optimizers()}.items()
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, part in {**self.nets(), **self.optimizers()}.items():
            part.load_state_dict(state[name])
