"""GRU for CPU tensors in two C++ calls (``recurrent.cpp``): the forward, and the backward.

PyTorch's own CPU GRU records every step's cell as a handful of ATen ops (per-step matrix
products, sigmoids, products), and autograd replays each backwards: thousands of small ops a
training step. Here, with gates [r, z, n] and the equations of reference.py:

* forward: ``gi = x W_ih^T + b_ih`` for every step in one GEMM; then per step one
  (B, H) x (H, 3H) GEMM ``gh_t = h_{t-1} W_hh^T + b_hh`` and the gate arithmetic in plain C++
  loops; it saves r, z, n and gh_n of every step, (B, T, 4H), besides the states h (B, T, H).
* backward: a reverse loop with one (B, 3H) x (3H, H) GEMM per step for the state's gradient,
  ``dh_{t-1} = dy_{t-1} + dh_t ⊙ z + dgh_t W_hh``, collecting the gates' gradients
  ``dgi_t = [da_r, da_z, da_n]`` and ``dgh_t = [da_r, da_z, da_n ⊙ r]`` (with
  ``da_n = dh (1 - z)(1 - n^2)``, ``da_r = da_n gh_n r (1 - r)``,
  ``da_z = dh (h_{t-1} - n) z (1 - z)``); then ``dx = dgi W_ih``, ``dW_ih = dgi^T x``,
  ``dW_hh = sum_t dgh_t^T h_{t-1}`` as three GEMMs over all B*T rows, and the biases' sums.

The initial state is zero and only the states are returned (no final-state output): what the
blocks' training forward needs.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .._build import load_cpu_extension


def _extension() -> ModuleType | None:
    return load_cpu_extension("recurrent", Path(__file__).with_name("recurrent.cpp"))


def available() -> bool:
    """True when the C++ kernel is built (building it now if needed)."""
    return _extension() is not None


def _built() -> ModuleType:
    extension = _extension()
    if extension is None:
        raise RuntimeError("the C++ recurrent kernel is not built: check available() first")
    return extension


class _GRUFused(torch.autograd.Function):
    """(x, W_ih, W_hh, b_ih, b_hh) -> h (B, T, H); every tensor contiguous, one dtype."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight_ih: torch.Tensor,
        weight_hh: torch.Tensor,
        bias_ih: torch.Tensor,
        bias_hh: torch.Tensor,
    ) -> torch.Tensor:
        y, saved = _built().gru_forward(x, weight_ih, weight_hh, bias_ih, bias_hh)
        ctx.save_for_backward(x, weight_ih, weight_hh, y, saved)
        return y

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight_ih, weight_hh, y, saved = ctx.saved_tensors
        need_dx = ctx.needs_input_grad[0]
        dx, dw_ih, dw_hh, db_ih, db_hh = _built().gru_backward(
            gy.contiguous(), x, weight_ih, weight_hh, y, saved, need_dx
        )
        return (dx if need_dx else None), dw_ih, dw_hh, db_ih, db_hh


def gru(
    x: torch.Tensor,
    weight_ih: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_ih: torch.Tensor,
    bias_hh: torch.Tensor,
) -> torch.Tensor:
    """Same contract as ``reference.gru``, in ``recurrent.cpp`` (which must be built):
    computed in float64 when any input is float64, else float32; returned in x's dtype."""
    tensors = (x, weight_ih, weight_hh, bias_ih, bias_hh)
    dtype = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
    if x.shape[0] == 0 or x.shape[1] == 0:
        return x.new_zeros(*x.shape[:2], weight_hh.shape[1])
    args = [t.to(dtype).contiguous() for t in tensors]
    return _GRUFused.apply(*args).to(x.dtype)
