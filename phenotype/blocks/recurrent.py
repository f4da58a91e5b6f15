"""Gated recurrences: LSTM (Hochreiter & Schmidhuber, 1997) and GRU (Cho et al., 2014).

    LSTM: [i, f, g, o] = σ,σ,tanh,σ(x_t W + h_{t-1} U + b),  c_t = f⊙c_{t-1} + i⊙g,
          h_t = o⊙tanh(c_t)
    GRU:  r, z = σ(x_t W_{r,z} + h_{t-1} U_{r,z} + b),  n = tanh(x_t W_n + b_n + r⊙(h_{t-1} U_n + b'_n)),
          h_t = (1 - z)⊙n + z⊙h_{t-1}
    y_t = h_t W_out (hidden -> d_model)

The parameters are PyTorch's `nn.LSTM` / `nn.GRU` (`rnn.weight_ih_l0` (gates*H, D),
`rnn.weight_hh_l0` (gates*H, H), `rnn.bias_ih_l0`, `rnn.bias_hh_l0`; gate order i, f, g, o and
r, z, n). The GRU's training forward on CPU (gradients needed, float32/float64, outside
`torch.export`/`torch.compile`/`reference_only`: `kernels.recurrent.gru_fast_path`) runs the
fused C++ kernel `kernels.recurrent.gru`, one call forward and one backward instead of the
per-step cell ops autograd records for `nn.GRU`, with the same outputs and gradients; the rest
(CUDA (cuDNN), inference, other dtypes, a kernel that did not build) runs the module itself,
and so does the LSTM: PyTorch's CPU LSTM already trains through oneDNN's fused LSTM, forward
and backward, which a C++ LSTM written like the GRU's did not beat (about 21.8 against 20.2 ms
at batch 16 x 64, d_model 96, hidden 192, one thread). `step` runs the module on one token
with the carried (h, c) / h. The recurrences' matrix work is declared in
`extra_flops_per_token` (fused kernels are opaque to a FLOP counter on some backends).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from dogma_evolve.phenotype.blocks.base import BlockConfig, Mixer, linear_params


@dataclass(frozen=True)
class LSTMConfig(BlockConfig, kind="lstm", role="sequence"):
    hidden: int
    gates: ClassVar[int] = 4  # LSTM: input, forget, cell, output

    def build(self) -> nn.Module:
        return FusedRecurrence(self)

    def num_params(self) -> int:
        h, d, g = self.hidden, self.d_model, self.gates
        return g * h * (d + h) + 2 * g * h + linear_params(h, d, self.bias)

    def flops_per_token(self, seq_len: int) -> int:
        return 2 * self.hidden * self.d_model + self.extra_flops_per_token()

    def extra_flops_per_token(self) -> int:
        return 2 * self.gates * self.hidden * (self.d_model + self.hidden)

    def state_fixed(self) -> int:
        return 2 * self.hidden


@dataclass(frozen=True)
class GRUConfig(LSTMConfig, kind="gru", role="sequence"):
    gates: ClassVar[int] = 3  # GRU: reset, update, new

    def state_fixed(self) -> int:
        return self.hidden


class FusedRecurrence(Mixer[LSTMConfig]):
    def __init__(self, cfg: LSTMConfig):
        super().__init__()
        self.cfg = cfg
        rnn = nn.GRU if isinstance(cfg, GRUConfig) else nn.LSTM
        self.rnn = rnn(cfg.d_model, cfg.hidden, batch_first=True)
        self.out_proj = nn.Linear(cfg.hidden, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> (B, T, D). The recurrence runs with autocast off, in its weights'
        dtype: its state accumulates in float32 under bfloat16 mixed precision, as the
        scans' does (`kernels._dispatch.full_precision`), and oneDNN has no bfloat16 LSTM
        on a CPU without bfloat16 units."""
        device_type = x.device.type
        if device_type in ("cpu", "cuda") and torch.is_autocast_enabled(device_type):
            with torch.autocast(device_type, enabled=False):
                h = self._states(x.to(self.out_proj.weight.dtype))
        else:
            h = self._states(x)
        return self.out_proj(h)

    def _states(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D) -> every state h_t: (B, T, H), from zero. The GRU's training path on
        CPU is the fused C++ kernel (same parameters, same result); everything else
        `nn.GRU` / `nn.LSTM`."""
        rnn = self.rnn
        if isinstance(rnn, nn.GRU):
            from dogma_evolve.kernels._dispatch import needs_grad
            from dogma_evolve.kernels.recurrent import gru, gru_fast_path

            w_ih, w_hh, b_ih, b_hh = rnn.all_weights[0]  # weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0
            if needs_grad(x, w_ih, w_hh, b_ih, b_hh) and gru_fast_path(x, w_ih, w_hh, b_ih, b_hh):
                return gru(x, w_ih, w_hh, b_ih, b_hh, backend="cpu")
        return rnn(x)[0]

    def init_state(self, batch: int) -> Any:
        h = self.out_proj.weight.new_zeros(1, batch, self.cfg.hidden)
        return h if isinstance(self.rnn, nn.GRU) else (h, h.clone())

    def step(self, x_t: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """x_t: (B, D) -> (B, D); state: h (1, B, H) for the GRU, (h, c) for the LSTM."""
        y, state = self.rnn(x_t[:, None], state)
        return self.out_proj(y[:, 0]), state

    def state_size(self, seq_len: int) -> int:
        return self.cfg.state_fixed()
