"""Argument checks, layout helpers and the wrapper shared by the selective-scan backends."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float64 when any input is float64, float32 otherwise (half inputs are upcast)."""
    if any(t is not None and t.dtype == torch.float64 for t in tensors):
        return torch.float64
    return torch.float32


def check_inputs(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
) -> None:
    """Raise ``ValueError`` unless the shapes follow the Mamba ``selective_scan_ref`` contract.

    u, delta: (batch, dim, L); A: (dim, N) real; B, C: (batch, N, L), (batch, G, N, L) with
    G dividing dim, or (dim, N); D, delta_bias: (dim,); z: (batch, dim, L);
    initial_state: (batch, dim, N).
    """
    if u.dim() != 3 or delta.shape != u.shape:
        raise ValueError(f"u and delta must both be (batch, dim, L), got {u.shape}, {delta.shape}")
    batch, dim, length = u.shape
    if A.is_complex() or A.dim() != 2 or A.shape[0] != dim:
        raise ValueError(f"A must be real (dim={dim}, N), got {A.shape} {A.dtype}")
    state = A.shape[1]
    for name, M in (("B", B), ("C", C)):
        if M.dim() == 2:
            ok = M.shape == (dim, state)
        elif M.dim() == 3:
            ok = M.shape == (batch, state, length)
        elif M.dim() == 4:
            groups = M.shape[1]
            ok = M.shape == (batch, groups, state, length) and groups > 0 and dim % groups == 0
        else:
            ok = False
        if not ok:
            raise ValueError(
                f"{name} must be (dim, N), (batch, N, L) or (batch, G, N, L) with G | dim; "
                f"got {tuple(M.shape)} for u {tuple(u.shape)} and N={state}"
            )
    for name, v in (("D", D), ("delta_bias", delta_bias)):
        if v is not None and v.shape != (dim,):
            raise ValueError(f"{name} must be (dim,)=({dim},), got {tuple(v.shape)}")
    if z is not None and z.shape != u.shape:
        raise ValueError(f"z must be (batch, dim, L) like u, got {tuple(z.shape)}")
    if initial_state is not None and initial_state.shape != (batch, dim, state):
        raise ValueError(
            f"initial_state must be (batch, dim, N)=({batch}, {dim}, {state}), "
            f"got {tuple(initial_state.shape)}"
        )


def as_groups(M: torch.Tensor) -> torch.Tensor:
    """View a variable B or C as (batch, G, N, L); (batch, N, L) becomes one group."""
    return M.unsqueeze(1) if M.dim() == 3 else M


def per_channel(M: torch.Tensor, dim: int) -> torch.Tensor:
    """Expand a variable B or C to one row per channel: (batch, dim, L, N)."""
    M = as_groups(M)
    return M.repeat_interleave(dim // M.shape[1], dim=1).transpose(-1, -2)


def step_sizes(
    delta: torch.Tensor,
    delta_bias: torch.Tensor | None,
    delta_softplus: bool,
    dtype: torch.dtype,
) -> torch.Tensor:
    """dt = softplus(delta + delta_bias) in ``dtype`` (bias and softplus optional): (b, d, L)."""
    dt = delta.to(dtype)
    if delta_bias is not None:
        dt = dt + delta_bias.to(dtype)[:, None]
    return F.softplus(dt) if delta_softplus else dt


def gate(y: torch.Tensor, z: torch.Tensor | None) -> torch.Tensor:
    """y * silu(z) when a gate is given."""
    return y if z is None else y * F.silu(z.to(y.dtype))


def time_major(M: torch.Tensor) -> torch.Tensor:
    """A variable B/C as (batch, G, L, N), so that a step reads N consecutive values; a
    constant (dim, N) one unchanged. The layout the fused backends (C++, Triton) read."""
    return M.contiguous() if M.dim() == 2 else as_groups(M).transpose(-1, -2).contiguous()


def from_time_major(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The gradient of a `time_major` operand, back to the operand's own layout `shape`."""
    return grad if grad.dim() == 2 else grad.transpose(-1, -2).reshape(shape)


def groups(Mk: torch.Tensor) -> int:
    """Group count of a time-major operand; 1 for a constant one (the Triton paths' grids)."""
    return Mk.shape[1] if Mk.dim() == 4 else 1


def block_d(dim: int, *group_counts: int) -> int:
    """Largest power of two <= 16 dividing every group's channel count."""
    block = 16
    while any((dim // g) % block for g in group_counts):
        block //= 2
    return block


def fused_selective_scan(
    core: type[torch.autograd.Function],
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    delta_softplus: bool,
    return_last_state: bool,
    initial_state: torch.Tensor | None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """A fused backend's `selective_scan` around its `core`, an autograd function
    (u, dt, A, B, C, D, h0) -> (y = <C, h> + D u, last state) in one float dtype: inputs cast
    to the compute dtype, step sizes prepared and the gate applied as differentiable ATen ops."""
    dtype = compute_dtype(u, delta, A, B, C)

    def cast(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(dtype).contiguous()

    dt = step_sizes(delta, delta_bias, delta_softplus, dtype).contiguous()
    result: Any = core.apply(cast(u), dt, cast(A), cast(B), cast(C), cast(D), cast(initial_state))
    y, last = result
    out = gate(y, z).to(u.dtype)
    return (out, last) if return_last_state else out
