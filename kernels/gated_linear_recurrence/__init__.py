"""Gated linear recurrence (gated linear attention, Mamba-2 SSD, retention).

Backends: ``"torch"`` (reference.py, chunked parallel form in PyTorch), ``"cpu"`` (cpu.py, a
step loop with its own backward for one-element states, dk = dv = 1: RG-LRU, the DNA strand
cascade, the epigenetic marks; compiled in C++, ``scalar_scan.cpp``, where it builds, PyTorch
ops otherwise; the reference for any other shape), ``"triton"``
(fused_recurrent.py, sequential over time) and ``"chunk"`` (chunk.py, Triton, parallel over time
within chunks). ``"auto"`` picks, on CUDA, ``"chunk"`` for training (T >= ``CHUNKED_MIN_LENGTH``
with gradients needed) and ``"triton"`` otherwise; on CPU the step loop for one-element states
and the reference for the rest.
"""

from __future__ import annotations

import torch

from .._dispatch import full_precision, needs_grad, opaque_to_compile, resolve_backend
from . import reference

__all__ = ["gated_linear_recurrence"]


def _check(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None,
    chunk_size: int,
) -> None:
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must both be (B, H, T, dk), got {tuple(q.shape)}, {tuple(k.shape)}")
    batch, heads, length, dk = q.shape
    if v.dim() != 4 or v.shape[:3] != (batch, heads, length):
        raise ValueError(f"v must be (B, H, T, dv) matching q, got {tuple(v.shape)}")
    if log_decay.shape not in ((batch, heads, length), (batch, heads, length, dk)):
        raise ValueError(f"log_decay must be (B, H, T) or (B, H, T, dk), got {tuple(log_decay.shape)}")
    if initial_state is not None and initial_state.shape != (batch, heads, dk, v.shape[-1]):
        raise ValueError(f"initial_state must be (B, H, dk, dv), got {tuple(initial_state.shape)}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")


@opaque_to_compile
@full_precision
def gated_linear_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    chunk_size: int = 64,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Linear recurrence with a data-dependent diagonal decay, per (batch, head)::

        S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,   S_{-1} = initial_state or 0
        o_t = S_t^T q_t

    Args:
        q, k: (B, H, T, dk). v: (B, H, T, dv).
        log_decay: g <= 0, either (B, H, T), one decay per head and step (Mamba-2 SSD,
            retention with g = log(gamma)), or (B, H, T, dk), one per key channel (GLA).
        initial_state: (B, H, dk, dv); resuming from a returned final state equals one run.
        chunk_size: chunk length of the chunked forms ("torch"; "chunk" rounds it up to a power
            of two in [16, 64]); the fused recurrent "triton" path has no chunks.
        backend: "auto", "torch", "triton" (fused recurrent), "chunk" (chunked Triton), or
            "cpu" (the step loop when dk = dv = 1, the reference otherwise).

    Returns:
        o: (B, H, T, dv) in q's dtype; final_state: (B, H, dk, dv) in the compute dtype
        (float32, or float64 for float64 inputs).
    """
    _check(q, k, v, log_decay, initial_state, chunk_size)
    grad = needs_grad(q, k, v, log_decay, initial_state)
    scalar_state = q.shape[-1] == 1 and v.shape[-1] == 1
    path = resolve_backend(
        backend, q.device, cpu_path=scalar_state, chunked_path=True, length=q.shape[2], grad=grad
    )
    if path in ("triton", "chunk"):
        from . import triton as triton_path

        return triton_path.gated_linear_recurrence(
            q, k, v, log_decay, initial_state, chunk_size, chunked=path == "chunk"
        )
    if path == "cpu" and scalar_state:
        from . import cpu as cpu_path

        return cpu_path.gated_linear_recurrence(q, k, v, log_decay, initial_state)
    return reference.gated_linear_recurrence(q, k, v, log_decay, initial_state, chunk_size)
