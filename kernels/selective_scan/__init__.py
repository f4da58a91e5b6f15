"""Selective scan (Mamba S6) with the semantics of Mamba's ``selective_scan_ref``.

Backends: ``"torch"`` (reference.py, per-step loop), ``"cpu"`` (fused C++ loop, cpu.py),
``"triton"`` (fused_recurrent.py, sequential over L) and ``"chunk"`` (chunk.py, parallel over
time within chunks). ``"auto"`` picks, on CUDA, ``"chunk"`` for training (L >=
``CHUNKED_MIN_LENGTH`` with gradients needed) and ``"triton"`` otherwise; on CPU the C++ loop,
falling back to the reference when the C++ kernel cannot be built.
"""

from __future__ import annotations

import torch

from .._dispatch import full_precision, needs_grad, opaque_to_compile, resolve_backend
from . import reference
from .shapes import check_inputs

__all__ = ["selective_scan"]


@opaque_to_compile
@full_precision
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
    backend: str = "auto",
    *,
    initial_state: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Selective state-space scan over L steps, per batch row and channel::

        dt_t = softplus(delta_t + delta_bias)          (bias and softplus optional)
        h_t  = exp(dt_t * A) * h_{t-1} + dt_t * B_t * u_t,   h_{-1} = initial_state or 0
        y_t  = <C_t, h_t> + D * u_t,   out_t = y_t * silu(z_t)   (D and z optional)

    Args:
        u, delta: (batch, dim, L).
        A: (dim, N), real (the decay is exp(dt * A); A < 0 for a stable scan).
        B, C: (batch, N, L), (batch, G, N, L) with G dividing dim (channel d uses group
            d // (dim / G)), or (dim, N) constant over time and batch.
        D, delta_bias: (dim,). z: (batch, dim, L).
        return_last_state: also return h_{L-1}: (batch, dim, N).
        backend: "auto", "torch", "cpu", "triton" (fused recurrent) or "chunk" (chunked Triton).
        initial_state: (batch, dim, N) state before step 0, so that a sequence split in two
            and resumed from the first part's last state equals one run.

    Returns:
        out: (batch, dim, L) in u's dtype, or (out, last_state) with last_state in the compute
        dtype (float32, or float64 when an input is float64).
    """
    check_inputs(u, delta, A, B, C, D, z, delta_bias, initial_state)
    args = (u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state, initial_state)
    grad = needs_grad(u, delta, A, B, C, D, z, delta_bias, initial_state)
    path = resolve_backend(backend, u.device, cpu_path=True, chunked_path=True, length=u.shape[2], grad=grad)
    if path == "cpu":
        from . import cpu

        if cpu.available():
            return cpu.selective_scan(*args)
        if backend == "cpu":
            raise RuntimeError("selective_scan: the C++ CPU kernel could not be built")
        path = "torch"
    if path in ("triton", "chunk"):
        from . import triton as triton_path

        return triton_path.selective_scan(*args, chunked=path == "chunk")
    return reference.selective_scan(*args)
