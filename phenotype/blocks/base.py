"""The contract every block honours, and the shared config base class.

A block is described by a frozen config dataclass (what accounting reads) whose `build()`
returns the module. Every config answers, analytically and without building anything:

- `num_params()` — parameters of the built module;
- `active_params()` — parameters touched per token (differs from num_params for MoE);
- `flops_per_token(seq_len)` — forward FLOPs of the dense linear algebra the module runs
  (linear layers, convolutions, attention score and value products, counted as
  FlopCounterMode counts them: 2 per multiply-add) plus `extra_flops_per_token()`, the
  elementwise work of scans that a FLOP counter cannot see;
- `state_per_token()` / `state_fixed()` — inference-state elements that grow with context
  (a KV cache) and that do not (a recurrent state); `state_elements(seq_len)` the exact
  count after `seq_len` tokens (a sliding window's cache stops growing at the window).

`from_gene(params, structural, layer_idx)` makes the config of one layer; `layer_idx` is the
copy index within the coding region, for per-layer patterns (local:global attention).

Every sequence mixer module (zoology's protocol) has `forward(x: (B, T, D)) -> (B, T, D)`,
`init_state(batch)`, `step(x_t: (B, D), state) -> (y_t: (B, D), state)`, and
`state_size(seq_len)` in elements, equal to what `init_state` + `step` really allocate.
Channel mixers are stateless: their `step` is `forward` on one token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class BlockConfig:
    """Base class of block configs. `d_model` and `bias` come from the structural region."""

    d_model: int
    bias: bool

    @classmethod
    def from_gene(cls, params: dict[str, Any], structural: dict[str, Any], layer_idx: int = 0) -> BlockConfig:
        """The config of one layer; `layer_idx` is the copy index within its coding region
        (what per-layer patterns such as local:global attention interleaving read)."""
        return cls(d_model=structural["d_model"], bias=structural["bias"], **params)

    def build(self) -> nn.Module:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def num_params(self) -> int:  # pragma: no cover
        raise NotImplementedError

    def active_params(self) -> int:
        return self.num_params()

    def flops_per_token(self, seq_len: int) -> int:  # pragma: no cover
        raise NotImplementedError

    def extra_flops_per_token(self) -> int:
        return 0

    def state_per_token(self) -> int:
        return 0

    def state_fixed(self) -> int:
        return 0

    def state_elements(self, seq_len: int) -> int:
        """Inference-state elements after `seq_len` tokens: what the module's
        `state_size(seq_len)` must equal."""
        return self.state_per_token() * seq_len + self.state_fixed()


def linear_params(d_in: int, d_out: int, bias: bool) -> int:
    return d_in * d_out + (d_out if bias else 0)


class ChannelMixer(nn.Module):
    """Stateless per-token mixers: `step` is `forward` on one token, no state."""

    def init_state(self, batch: int) -> None:
        return None

    def step(self, x_t: torch.Tensor, state: None) -> tuple[torch.Tensor, None]:
        return self.forward(x_t[:, None])[:, 0], state

    def state_size(self, seq_len: int) -> int:
        return 0


def no_weight_decay(*params: nn.Parameter) -> None:
    """Tag parameters that must not decay (A_log, D, dt_bias, norms): the trainer reads it."""
    for p in params:
        p._no_weight_decay = True  # type: ignore[attr-defined]
