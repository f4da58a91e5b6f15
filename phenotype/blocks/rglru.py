"""The Hawk/Griffin recurrent block with its Real-Gated Linear Recurrent Unit (De et al., 2024).

Width E, H heads for the block-diagonal gate matrices:

    gate branch:        g_t = gelu(x_t W_g + b_g)                                  (E)
    recurrent branch:   u = causal_depthwise_conv(x W_u + b_u)   (kernel 4)
    RG-LRU:             r_t = σ(u_t W_a + b_a),  i_t = σ(u_t W_x + b_x)   (block-diagonal W)
                        log a_t = -c · r_t · softplus(Λ)   (c = 8)
                        h_t = a_t ⊙ h_{t-1} + √(1 - a_t²) ⊙ (i_t ⊙ u_t)
    y_t = (h_t ⊙ g_t) W_o + b_o

(The reference resets √(1 - a²) to 1 at document starts; we have no document boundaries.)
The diagonal recurrence runs as a gated linear recurrence with one 1 x 1 state per channel
(`kernels.gated_linear_recurrence`, heads = E) in training and step by step in inference.
State: the conv window E·(k-1) and h (E).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.base import (
    BlockConfig,
    Mixer,
    depthwise_conv_step,
    linear_params,
    no_weight_decay,
)

_C = 8.0


@dataclass(frozen=True)
class RGLRUConfig(BlockConfig, kind="rglru", role="sequence"):
    width: int  # E (Griffin: 4/3 · d_model)
    heads: int  # blocks of the gates' block-diagonal matrices
    d_conv: int

    def build(self) -> RGLRUBlock:
        return RGLRUBlock(self)

    def num_params(self) -> int:
        d, e = self.d_model, self.width
        gates = 2 * (e * e // self.heads + e)
        return (
            2 * linear_params(d, e, self.bias)
            + e * (self.d_conv + 1)
            + gates
            + e
            + linear_params(e, d, self.bias)
        )

    def flops_per_token(self, seq_len: int) -> int:
        d, e = self.d_model, self.width
        return (
            2 * 3 * d * e + 2 * e * self.d_conv + 2 * 2 * e * e // self.heads + self.extra_flops_per_token()
        )

    def extra_flops_per_token(self) -> int:
        return 5 * self.width

    def state_fixed(self) -> int:
        return self.width * self.d_conv


class RGLRUBlock(Mixer[RGLRUConfig]):
    def __init__(self, cfg: RGLRUConfig):
        super().__init__()
        self.cfg = cfg
        d, e, h = cfg.d_model, cfg.width, cfg.heads
        self.gate_proj = nn.Linear(d, e, bias=cfg.bias)
        self.in_proj = nn.Linear(d, e, bias=cfg.bias)
        self.conv1d = nn.Conv1d(e, e, cfg.d_conv, groups=e, bias=True)
        block = e // h
        self.W_a = nn.Parameter(torch.randn(h, block, block) / math.sqrt(block))
        self.W_x = nn.Parameter(torch.randn(h, block, block) / math.sqrt(block))
        self.b_a = nn.Parameter(torch.zeros(e))
        self.b_x = nn.Parameter(torch.zeros(e))
        # a = exp(-softplus(Λ)) uniform in [0.9, 0.999] at r = 1/c (Griffin's init ring).
        a = torch.empty(e).uniform_(0.9, 0.999)
        self.a_param = nn.Parameter(torch.log(torch.expm1(-torch.log(a))))
        self.out_proj = nn.Linear(e, d, bias=cfg.bias)
        no_weight_decay(self.a_param)

    def _block_diag(self, u: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """u (..., E) -> u · blockdiag(w_1..w_H) + b; one (rows, E/H) x (E/H, E/H) product per
        head (a broadcast `@` over (..., H, 1, E/H) is a matrix product per token and head)."""
        rows = u.reshape(-1, self.cfg.heads, u.shape[-1] // self.cfg.heads).transpose(0, 1)  # (H, N, E/H)
        return torch.bmm(rows, w).transpose(0, 1).reshape(u.shape) + b

    def _gated(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Post-conv u (..., E) -> log a_t and the normalised input √(1-a²)·i·u."""
        r = torch.sigmoid(self._block_diag(u, self.W_a, self.b_a))
        i = torch.sigmoid(self._block_diag(u, self.W_x, self.b_x))
        log_a = -_C * r * F.softplus(self.a_param)
        return log_a, torch.sqrt(-torch.expm1(2 * log_a)) * i * u

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        import dogma_evolve.kernels as kernels

        g = F.gelu(self.gate_proj(x))
        u = self.in_proj(x).transpose(1, 2)
        u = self.conv1d(F.pad(u, (self.cfg.d_conv - 1, 0))).transpose(1, 2)
        log_a, v = self._gated(u)  # (B, T, E)
        ones = v.new_ones(v.shape[0], v.shape[2], v.shape[1], 1)
        h, _ = kernels.gated_linear_recurrence(
            ones, ones, v.transpose(1, 2)[..., None], log_a.transpose(1, 2)
        )
        return self.out_proj(h[..., 0].transpose(1, 2) * g)

    def init_state(self, batch: int) -> dict[str, torch.Tensor]:
        e, p = self.cfg.width, self.b_a
        return {"conv": p.new_zeros(batch, e, self.cfg.d_conv - 1), "h": p.new_zeros(batch, e)}

    def step(self, x_t: torch.Tensor, state: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        """x_t: (B, D) -> (B, D)."""
        g = F.gelu(self.gate_proj(x_t))
        window = torch.cat([state["conv"], self.in_proj(x_t)[:, :, None]], -1)
        u = depthwise_conv_step(self.conv1d, window)
        log_a, v = self._gated(u)
        h = torch.exp(log_a) * state["h"] + v
        return self.out_proj(h * g), {"conv": window[:, :, 1:], "h": h}

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()
