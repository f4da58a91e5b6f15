"""Channel mixers: the MLP (ReLU, GELU), SwiGLU and GeGLU.

mlp(x)    = act(x W_1 + b_1) W_2 + b_2                     (Vaswani et al., 2017)
swiglu(x) = (silu(x W_1) ⊙ (x W_3)) W_2                    (Shazeer, 2020)
geglu(x)  = (gelu(x W_1) ⊙ (x W_3)) W_2                    (Shazeer, 2020)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dogma_evolve.phenotype.blocks.base import BlockConfig, ChannelMixer, linear_params

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "gelu": F.gelu}


@dataclass(frozen=True)
class MLPConfig(BlockConfig, kind="mlp", role="channel"):
    hidden: int
    activation: str  # gelu | relu

    def build(self) -> MLP:
        return MLP(self)

    def num_params(self) -> int:
        return linear_params(self.d_model, self.hidden, self.bias) + linear_params(
            self.hidden, self.d_model, self.bias
        )

    def flops_per_token(self, seq_len: int) -> int:
        return 4 * self.d_model * self.hidden


class MLP(ChannelMixer[MLPConfig]):
    def __init__(self, cfg: MLPConfig):
        super().__init__()
        self.cfg = cfg
        self.up = nn.Linear(cfg.d_model, cfg.hidden, bias=cfg.bias)
        self.down = nn.Linear(cfg.hidden, cfg.d_model, bias=cfg.bias)
        self.act = _ACTIVATIONS[cfg.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        return self.down(self.act(self.up(x)))


@dataclass(frozen=True)
class SwiGLUConfig(BlockConfig, kind="swiglu", role="channel"):
    hidden: int

    def build(self) -> SwiGLU:
        return SwiGLU(self)

    def num_params(self) -> int:
        return 2 * linear_params(self.d_model, self.hidden, self.bias) + linear_params(
            self.hidden, self.d_model, self.bias
        )

    def flops_per_token(self, seq_len: int) -> int:
        return 6 * self.d_model * self.hidden


class SwiGLU(ChannelMixer[SwiGLUConfig]):
    def activation(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)

    def __init__(self, cfg: SwiGLUConfig):
        super().__init__()
        self.cfg = cfg
        self.gate = nn.Linear(cfg.d_model, cfg.hidden, bias=cfg.bias)
        self.up = nn.Linear(cfg.d_model, cfg.hidden, bias=cfg.bias)
        self.down = nn.Linear(cfg.hidden, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D)."""
        return self.down(self.activation(self.gate(x)) * self.up(x))


@dataclass(frozen=True)
class GeGLUConfig(SwiGLUConfig, kind="geglu", role="channel"):
    def build(self) -> GeGLU:
        return GeGLU(self)


class GeGLU(SwiGLU):
    def activation(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)
