"""Normalisation layers: LayerNorm (Ba et al., 2016) and RMSNorm (Zhang & Sennrich, 2019).

layernorm(x) = (x - mean(x)) / sqrt(var(x) + eps) · γ (+ β when biases are on)
rmsnorm(x)   = x / sqrt(mean(x²) + eps) · γ
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from dogma_evolve.phenotype.blocks.base import no_weight_decay


@dataclass(frozen=True)
class NormConfig:
    kind: str  # "layernorm" | "rmsnorm"
    d_model: int
    eps: float
    bias: bool

    def build(self) -> nn.Module:
        norm: nn.LayerNorm | nn.RMSNorm
        if self.kind == "layernorm":
            norm = nn.LayerNorm(self.d_model, eps=self.eps, bias=self.bias)
        else:
            norm = nn.RMSNorm(self.d_model, eps=self.eps)
        no_weight_decay(*norm.parameters())
        return norm

    def num_params(self) -> int:
        return self.d_model * (2 if self.kind == "layernorm" and self.bias else 1)
