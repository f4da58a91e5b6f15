"""Strand attention (DOGMA): causal softmax attention whose scores carry a learned
"hybridisation energy" per head, a function of the distance Δ = t - s between the strands:

    ΔG_j(Δ) = -softplus(ε_j) · log(1 + Δ) + Σ_{i<I} a_{j,i} · exp(-Δ / 2^i)
    o_t = Σ_{s ≤ t} softmax_s(q_t·k_s / √e + ΔG_j(t - s)) v_s

a long-range entropic penalty (a polymer loop's log-length cost) plus short-range stacking
terms at I = `scales` length scales. Everything else (GQA, window, QK-norm, RoPE/ALiBi) is
`attention`'s; the energy adds heads·(1 + I) parameters and no state beyond the KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.attention import Attention, AttentionConfig
from dogma_evolve.phenotype.blocks.base import no_weight_decay


@dataclass(frozen=True)
class StrandAttentionConfig(AttentionConfig, kind="strand_attention", role="sequence"):
    scales: int

    def build(self) -> StrandAttention:
        return StrandAttention(self)

    def num_params(self) -> int:
        return super().num_params() + self.heads * (1 + self.scales)


class StrandAttention(Attention):
    cfg: StrandAttentionConfig

    def __init__(self, cfg: StrandAttentionConfig):
        super().__init__(cfg)
        self.entropy = nn.Parameter(torch.full((cfg.heads,), -2.0))
        self.stacking = nn.Parameter(torch.zeros(cfg.heads, cfg.scales))
        no_weight_decay(self.entropy, self.stacking)  # position biases, as ALiBi's slopes

    def hybridisation_energy(self, delta: torch.Tensor) -> torch.Tensor:
        """delta: (Tq, Tk) distances t - s -> ΔG: (heads, Tq, Tk)."""
        dist = delta.clamp(min=0).to(self.entropy.dtype)
        lengths = 2.0 ** torch.arange(self.cfg.scales, device=dist.device, dtype=dist.dtype)
        stacking = torch.exp(-dist[..., None] / lengths)  # (Tq, Tk, I)
        return (
            -F.softplus(self.entropy)[:, None, None] * torch.log1p(dist)
            # a broadcast sum, not an einsum: per-sequence work, not per-token algebra
            + (stacking[None] * self.stacking[:, None, None, :]).sum(-1)
        )

    def _position_bias(self, delta: torch.Tensor) -> torch.Tensor:
        energy = self.hybridisation_energy(delta)
        alibi = super()._position_bias(delta)
        return energy if alibi is None else energy + alibi.to(energy.dtype)

    @property
    def has_position_bias(self) -> bool:
        return True
