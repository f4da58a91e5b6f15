"""The regulation gate: how regulatory regions express or silence coding regions per token.

A regulatory region with C:gate bases reads the residual stream x at its place in the
genome and emits a signal r_t = silu(x_t W_r + b_r), the concatenation of its gates'
outputs. Each `activates` / `represses` edge to a coding region turns the signal into a
per-token gate

    activates:  g_t = σ(w·r_t + b)        represses:  g_t = 1 - σ(w·r_t + b)

and every residual update of the target region (all its copies) is scaled by the product
of its incoming gates: x ← x + g_t · strength · f(norm(x)). Causal: g_t reads x_t only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from phenotype.blocks.base import BlockConfig, ChannelMixer, linear_params


@dataclass(frozen=True)
class GateConfig(BlockConfig):
    hidden: int = 16

    def build(self) -> RegulationGate:
        return RegulationGate(self)

    def num_params(self) -> int:
        return linear_params(self.d_model, self.hidden, True)

    def flops_per_token(self, seq_len: int) -> int:
        return 2 * self.d_model * self.hidden


class RegulationGate(ChannelMixer):
    def __init__(self, cfg: GateConfig):
        super().__init__()
        self.cfg = cfg
        self.signal = nn.Linear(cfg.d_model, cfg.hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> regulatory signal r: (B, T, hidden)."""
        return F.silu(self.signal(x))


def edge_gate_params(signal_width: int) -> int:
    """Parameters of one activates/represses edge: w (signal_width) and b."""
    return signal_width + 1


class EdgeGate(nn.Module):
    """Turns a regulatory signal (B, T, S) into a gate (B, T, 1) on the target region."""

    def __init__(self, signal_width: int, represses: bool):
        super().__init__()
        self.proj = nn.Linear(signal_width, 1)
        self.represses = represses

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        g = torch.sigmoid(self.proj(r))
        return 1 - g if self.represses else g
