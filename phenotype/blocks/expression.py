"""The expression folder (DOGMA's generative counterpart of the FFN, a G kind):

    fold(x) = act(LayerNorm(x) W_1 + b_1) W_2 + b_2

the transcribed representation is normalised, then folded through an MLP into the block
output. Its own LayerNorm (affine; bias with the structural `bias`) comes on top of the
residual layer's norm. Stateless per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.base import BlockConfig, ChannelMixer, linear_params, no_weight_decay


@dataclass(frozen=True)
class ExpressionConfig(BlockConfig, kind="expression", role="channel"):
    hidden: int
    activation: str  # gelu | silu

    def build(self) -> ExpressionFolder:
        return ExpressionFolder(self)

    def num_params(self) -> int:
        d, h = self.d_model, self.hidden
        norm = 2 * d if self.bias else d
        return norm + linear_params(d, h, True) + linear_params(h, d, True)

    def flops_per_token(self, seq_len: int) -> int:
        return 4 * self.d_model * self.hidden


class ExpressionFolder(ChannelMixer[ExpressionConfig]):
    def __init__(self, cfg: ExpressionConfig):
        super().__init__()
        self.cfg = cfg
        self.norm = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.fold_in = nn.Linear(cfg.d_model, cfg.hidden)
        self.fold_out = nn.Linear(cfg.hidden, cfg.d_model)
        self.act = F.gelu if cfg.activation == "gelu" else F.silu
        no_weight_decay(*self.norm.parameters())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        return self.fold_out(self.act(self.fold_in(self.norm(x))))
