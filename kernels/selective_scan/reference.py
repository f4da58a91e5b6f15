"""Selective scan in plain PyTorch: the ground truth for every other backend.

Semantics of Mamba's ``selective_scan_ref`` (real A only), extended with an initial state::

    delta_t  = softplus(delta_t + delta_bias)          (bias and softplus optional)
    h_t      = exp(delta_t * A) * h_{t-1} + delta_t * B_t * u_t      h_{-1} = initial_state or 0
    y_t      = <C_t, h_t> + D * u_t
    out_t    = y_t * silu(z_t)                          (gate optional)

per (batch, channel), with h_t of size N. Computed in float32 (float64 when an input is float64)
and returned in u's dtype; the last state stays in the compute dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .shapes import compute_dtype, per_channel


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    initial_state: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-step loop over L. Shapes: see ``dogma_evolve.kernels.selective_scan``."""
    dtype_in = u.dtype
    dtype = compute_dtype(u, delta, A, B, C)
    u = u.to(dtype)
    delta = delta.to(dtype)
    if delta_bias is not None:
        delta = delta + delta_bias.to(dtype)[:, None]
    if delta_softplus:
        delta = F.softplus(delta)
    batch, dim, length = u.shape
    A = A.to(dtype)

    decay = torch.exp(delta[..., None] * A[:, None, :])  # (batch, dim, L, N)
    delta_u = (delta * u)[..., None]  # (batch, dim, L, 1)
    input_BdLN = delta_u * (B.to(dtype)[:, None, :] if B.dim() == 2 else per_channel(B.to(dtype), dim))
    C_read = C.to(dtype) if C.dim() == 2 else per_channel(C.to(dtype), dim)  # (dim, N) | (b, d, L, N)

    h = initial_state.to(dtype) if initial_state is not None else u.new_zeros(batch, dim, A.shape[1])
    # unbind (not indexing) so that autograd sees one stack per tensor instead of a
    # full-size scatter per step
    decays, inputs = decay.unbind(2), input_BdLN.unbind(2)
    reads = [C_read] * length if C.dim() == 2 else C_read.unbind(2)
    ys = []
    for t in range(length):
        h = decays[t] * h + inputs[t]
        ys.append((h * reads[t]).sum(-1))
    y = torch.stack(ys, dim=2) if ys else u.new_zeros(batch, dim, 0)
    out = y if D is None else y + u * D.to(dtype)[:, None]
    if z is not None:
        out = out * F.silu(z.to(dtype))
    out = out.to(dtype_in)
    return (out, h) if return_last_state else out
