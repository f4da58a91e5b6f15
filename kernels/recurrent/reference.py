"""GRU in plain PyTorch, one step at a time: the ground truth for the C++ path (cpu.py).

PyTorch's `nn.GRU` semantics and parameter layout, gates [r, z, n] stacked along the rows of
``weight_ih`` (3H, D), ``weight_hh`` (3H, H), ``bias_ih``, ``bias_hh`` (3H)::

    r = σ(x_t W_ir^T + b_ir + h_{t-1} W_hr^T + b_hr)
    z = σ(x_t W_iz^T + b_iz + h_{t-1} W_hz^T + b_hz)
    n = tanh(x_t W_in^T + b_in + r ⊙ (h_{t-1} W_hn^T + b_hn))
    h_t = (1 - z) ⊙ n + z ⊙ h_{t-1}

from h_{-1} = 0 (a single layer, batch first, one direction).
"""

from __future__ import annotations

import torch


def gru(
    x: torch.Tensor,
    weight_ih: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_ih: torch.Tensor,
    bias_hh: torch.Tensor,
) -> torch.Tensor:
    """x: (B, T, D) -> every state h: (B, T, H), differentiated by autograd step by step."""
    gi = torch.nn.functional.linear(x, weight_ih, bias_ih)  # (B, T, 3H), all steps at once
    h = x.new_zeros(x.shape[0], weight_hh.shape[1])
    out = []
    for t in range(x.shape[1]):
        gh = torch.nn.functional.linear(h, weight_hh, bias_hh)
        i_r, i_z, i_n = gi[:, t].chunk(3, dim=-1)
        h_r, h_z, h_n = gh.chunk(3, dim=-1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        h = (1 - z) * n + z * h
        out.append(h)
    return torch.stack(out, dim=1) if out else x.new_zeros(*x.shape[:2], weight_hh.shape[1])
