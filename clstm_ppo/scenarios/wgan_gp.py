"""WGAN-GP on bar sequences (Gulrajani et al., 2017), optionally conditioned on a regime label per bar.

The generator is a GRU that reads one noise vector per bar, so it produces paths of any length from the same
weights: it learns on windows of ``seq_len`` bars and samples 252-bar years. The critic is a GRU whose per-bar
scores are averaged; its gradient penalty pulls the norm of its gradient at points between real and generated
windows towards 1. With ``n_labels > 0`` both read a one-hot regime label beside every bar (the cGAN).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


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
class WganSettings:
    hidden: int = 32
    layers: int = 1  # one GRU layer: the gradient penalty's double backward doubles the critic's cost
    noise_dim: int = 8
    n_critic: int = 5  # critic updates per generator update
    gp_weight: float = 10.0
    lr: float = 1e-4
    betas: tuple[float, float] = (0.5, 0.9)  # the WGAN-GP paper's Adam settings


def one_hot(labels: torch.Tensor | None, n_labels: int, like: torch.Tensor) -> torch.Tensor:
    """(B, L, n_labels) float one-hot of (B, L) integer labels; (B, L, 0) without labels."""
    if not n_labels:
        return like.new_zeros((*like.shape[:2], 0))
    return nn.functional.one_hot(labels, n_labels).to(like.dtype)


class WganGp:
    """Generator, critic and their optimisers; ``step`` does n_critic critic updates then one generator update."""

    kind = "wgan_gp"

    def __init__(self, n_features: int, settings: WganSettings, device: torch.device, n_labels: int = 0):
        self.settings, self.device, self.n_labels = settings, device, n_labels
        s = settings
        self.generator = SeqNet(s.noise_dim + n_labels, s.hidden, n_features, s.layers).to(device)
        self.critic = SeqNet(n_features + n_labels, s.hidden, 1, s.layers).to(device)
        self.g_opt = torch.optim.Adam(self.generator.parameters(), lr=s.lr, betas=s.betas)
        self.c_opt = torch.optim.Adam(self.critic.parameters(), lr=s.lr, betas=s.betas)

    def noise(self, batch: int, length: int, gen: torch.Generator | None = None) -> torch.Tensor:
        # drawn on the CPU, where a seeded generator lives, so a seed gives the same paths on every device
        return torch.randn(batch, length, self.settings.noise_dim, generator=gen).to(self.device)

    def generate(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        return self.generator(torch.cat([z, one_hot(labels, self.n_labels, z)], dim=-1))

    def score(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        return self.critic(torch.cat([x, one_hot(labels, self.n_labels, x)], dim=-1)).mean(dim=(1, 2))

    def _penalty(self, real: torch.Tensor, fake: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        eps = torch.rand(real.shape[0], 1, 1, device=self.device)
        mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
        grad, = torch.autograd.grad(self.score(mixed, labels).sum(), mixed, create_graph=True)
        return ((grad.flatten(1).norm(dim=1) - 1.0) ** 2).mean()

    def step(self, batches: list[tuple[torch.Tensor, torch.Tensor | None]], _step: int) -> dict[str, float]:
        """One generator update after len(batches) == n_critic critic updates, each on its own real batch."""
        for real, labels in batches:
            with torch.no_grad():
                fake = self.generate(self.noise(*real.shape[:2]), labels)
            wasserstein = self.score(real, labels).mean() - self.score(fake, labels).mean()
            loss = -wasserstein + self.settings.gp_weight * self._penalty(real, fake, labels)
            self.c_opt.zero_grad(set_to_none=True)
            loss.backward()
            self.c_opt.step()
        real, labels = batches[-1]
        g_loss = -self.score(self.generate(self.noise(*real.shape[:2]), labels), labels).mean()
        self.g_opt.zero_grad(set_to_none=True)
        g_loss.backward()
        self.g_opt.step()
        return {"critic_loss": loss.item(), "wasserstein": wasserstein.item(), "generator_loss": g_loss.item()}

    def batches_per_step(self, _step: int) -> int:
        return self.settings.n_critic

    @torch.no_grad()
    def sample(self, n: int, length: int, labels: torch.Tensor | None, gen: torch.Generator) -> torch.Tensor:
        self.generator.eval()
        out = self.generate(self.noise(n, length, gen), labels)
        self.generator.train()
        return out

    def nets(self) -> dict[str, nn.Module]:
        return {"generator": self.generator, "critic": self.critic}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"g_opt": self.g_opt, "c_opt": self.c_opt}

    def state_dict(self) -> dict[str, Any]:
        return {name: part.state_dict() for name, part in {**self.nets(), **self.optimizers()}.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, part in {**self.nets(), **self.optimizers()}.items():
            part.load_state_dict(state[name])
