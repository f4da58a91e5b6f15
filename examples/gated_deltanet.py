"""A user's own block kind in one file: a gated DeltaNet-style sequence mixer.

Load it with ``evolve plugin check gated_deltanet`` (run from this folder, or with it on
``PYTHONPATH``) and search with it by ``evolve run --plugin gated_deltanet``; see
docs/plugins.md. The file does what a built-in kind does in two places: it registers the
gene (``register_kind``: schema, defaults, sanity bounds, derivation, role) and the block
(``class ...Config(BlockConfig, kind=..., role=...)``: accounting and ``build()``).

The mixer (Yang, Kautz & Hatamizadeh, "Gated Delta Networks", 2024), per head h of width
d (q, k L2-normalised; α_t = σ(a_t) a decay gate, β_t = σ(b_t) a write strength)::

    S_t = α_t · S_{t-1} (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ        S: (d, d)
    o_t = S_t q_t
    y_t = W_o (o_t ⊙ silu(W_g x_t))

The delta rule writes v_t at key k_t after erasing what S held there, so the state is a
fixed (H, d, d) matrix per sequence: ``step`` carries it, ``forward`` runs the same
recurrence over time (a plain loop, clear rather than fast). The recurrence is elementwise
work a FLOP counter does not see, so it is declared as ``extra_flops_per_token``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.genome import KindSpec, register_kind
from dogma_evolve.genome.schema import integer
from dogma_evolve.phenotype.blocks.base import BlockConfig, Mixer, linear_params

KIND = "gated_deltanet"


def _derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """head_dim 0 = d_model / heads."""
    p["head_dim"] = p["head_dim"] or s["d_model"] // p["heads"]
    if p["head_dim"] < 1:
        raise ValueError(f"{p['heads']} heads leave no width of d_model {s['d_model']}")
    return p


register_kind(
    KindSpec(
        KIND,
        ("T",),
        {
            "heads": integer(2, 1, 256, "heads, each with its own (head_dim x head_dim) state"),
            "head_dim": integer(0, 0, 1024, "0 = d_model / heads"),
        },
        doc="gated delta rule (Yang et al., 2024)",
        derive=_derive,
        role="sequence",
        family="linear_attention",  # kind_substitution swaps it mostly with its kin
    )
)


@dataclasses.dataclass(frozen=True)
class GatedDeltaNetConfig(BlockConfig, kind=KIND, role="sequence"):
    heads: int
    head_dim: int

    @property
    def inner(self) -> int:
        return self.heads * self.head_dim

    def build(self) -> GatedDeltaNet:
        return GatedDeltaNet(self)

    def num_params(self) -> int:
        d, i, h, b = self.d_model, self.inner, self.heads, self.bias
        return 4 * linear_params(d, i, b) + 2 * linear_params(d, h, b) + linear_params(i, d, b)

    def flops_per_token(self, seq_len: int) -> int:
        d, i, h = self.d_model, self.inner, self.heads
        return 2 * (4 * d * i + 2 * d * h + i * d) + self.extra_flops_per_token()

    def extra_flops_per_token(self) -> int:
        # per head: S k (2d²), the erase-and-write update (5d²), S q (2d²)
        return 9 * self.heads * self.head_dim**2

    def state_fixed(self) -> int:
        return self.heads * self.head_dim**2


class GatedDeltaNet(Mixer[GatedDeltaNetConfig]):
    def __init__(self, cfg: GatedDeltaNetConfig):
        super().__init__()
        self.cfg = cfg
        d, i, h, b = cfg.d_model, cfg.inner, cfg.heads, cfg.bias
        self.q, self.k, self.v, self.g = (nn.Linear(d, i, bias=b) for _ in range(4))
        self.a, self.b = nn.Linear(d, h, bias=b), nn.Linear(d, h, bias=b)
        self.out = nn.Linear(i, d, bias=b)

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x (..., D) -> q, k, v (..., H, d), α, β (..., H)."""
        shape = (*x.shape[:-1], self.cfg.heads, self.cfg.head_dim)
        q = F.normalize(self.q(x).view(shape), dim=-1)
        k = F.normalize(self.k(x).view(shape), dim=-1)
        return q, k, self.v(x).view(shape), torch.sigmoid(self.a(x)), torch.sigmoid(self.b(x))

    @staticmethod
    def _update(state: torch.Tensor, q, k, v, alpha, beta) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of the recurrence: state (B, H, d, d), the rest of one token."""
        alpha, beta = alpha[..., None, None], beta[..., None, None]
        held = (state * k[..., None, :]).sum(-1)  # S k: (B, H, d)
        state = (
            alpha * (state - beta * held[..., :, None] * k[..., None, :])
            + beta * v[..., :, None] * k[..., None, :]
        )
        return (state * q[..., None, :]).sum(-1), state

    def _output(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.out(o.flatten(-2) * F.silu(self.g(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        q, k, v, alpha, beta = self._heads(x)
        state, outs = self.init_state(x.shape[0]).to(x.dtype), []
        for t in range(x.shape[1]):
            o, state = self._update(state, q[:, t], k[:, t], v[:, t], alpha[:, t], beta[:, t])
            outs.append(o)
        return self._output(torch.stack(outs, 1), x)

    def init_state(self, batch: int) -> torch.Tensor:
        c = self.cfg
        return self.out.weight.new_zeros(batch, c.heads, c.head_dim, c.head_dim)

    def step(self, x_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x_t: (B, D), state (B, H, d, d) -> y_t (B, D), the next state."""
        q, k, v, alpha, beta = self._heads(x_t)
        o, state = self._update(state, q, k, v, alpha, beta)
        return self._output(o, x_t), state

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()
