"""Causal short depthwise convolution (the token mixer of H3/Hyena/Mamba front ends):

    y_t = b + Σ_{j=0}^{k-1} w_j ⊙ x_{t-j}        (x_{<0} = 0; one filter per channel)

Training runs `Conv1d(groups=D)` over the left-padded sequence; `step` keeps the last k-1
inputs, D·(k-1) state elements whatever the context.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.base import BlockConfig, Mixer, depthwise_conv_step


@dataclass(frozen=True)
class ConvConfig(BlockConfig, kind="conv", role="sequence"):
    kernel: int

    def build(self) -> ShortConv:
        return ShortConv(self)

    def num_params(self) -> int:
        return self.d_model * self.kernel + self.d_model

    def flops_per_token(self, seq_len: int) -> int:
        return 2 * self.d_model * self.kernel

    def state_fixed(self) -> int:
        return self.d_model * (self.kernel - 1)


class ShortConv(Mixer[ConvConfig]):
    def __init__(self, cfg: ConvConfig):
        super().__init__()
        self.cfg = cfg
        self.conv1d = nn.Conv1d(cfg.d_model, cfg.d_model, cfg.kernel, groups=cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        x = F.pad(x.transpose(1, 2), (self.cfg.kernel - 1, 0))
        return self.conv1d(x).transpose(1, 2)

    def init_state(self, batch: int) -> torch.Tensor:
        return self.conv1d.weight.new_zeros(batch, self.cfg.d_model, self.cfg.kernel - 1)

    def step(self, x_t: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x_t: (B, D) -> (B, D); the state holds the previous k-1 inputs (B, D, k-1)."""
        window = torch.cat([state, x_t[:, :, None]], -1)
        y = depthwise_conv_step(self.conv1d, window)
        return y, window[:, :, 1:]

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()
