"""RWKV-4 weighted key-value operator (WKV), stable for large keys.

Backends: ``"torch"`` (reference.py, per-step loop differentiated by autograd), ``"cpu"``
(cpu.py: the same loop and the Triton kernel's hand-written backward compiled in C++,
``wkv.cpp``; written as PyTorch ops where the C++ kernel cannot be built) and ``"triton"``
(triton.py). ``"auto"`` picks Triton on CUDA and ``"cpu"`` on CPU.
"""

from __future__ import annotations

import torch

from .._dispatch import full_precision, opaque_to_compile, resolve_backend
from . import reference
from .reference import WKVState

__all__ = ["WKVState", "wkv", "wkv_with_state"]


def _check(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if k.dim() != 3 or v.shape != k.shape:
        raise ValueError(f"k and v must both be (B, T, C), got {tuple(k.shape)}, {tuple(v.shape)}")
    channels = k.shape[2]
    if w.shape != (channels,) or u.shape != (channels,):
        raise ValueError(f"w and u must be (C,)=({channels},), got {tuple(w.shape)}, {tuple(u.shape)}")


@opaque_to_compile
@full_precision
def wkv_with_state(
    w: torch.Tensor,
    u: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: WKVState | tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    backend: str = "auto",
) -> tuple[torch.Tensor, WKVState]:
    """WKV continuing from ``state``, for incremental inference and chunked training.

    Args:
        w: (C,) decay rate, >= 0. u: (C,) bonus for the current token. k, v: (B, T, C).
        state: (num, den, max), each (B, C): the true sums are num * e^max and den * e^max;
            None starts empty. Feeding the returned state to the next call equals one call on
            the concatenated sequence.
        backend: "auto", "torch", "triton", or "cpu" (the loop with a hand-written backward, in
            C++ where it builds).

    Returns:
        y: (B, T, C) in k's dtype; the state after the last token (float32, or float64 for
        float64 inputs). Gradients through the state treat it as (num e^max, den e^max).
    """
    _check(w, u, k, v)
    if state is not None:
        state = WKVState(*state)
        if any(s.shape != (k.shape[0], k.shape[2]) for s in state):
            raise ValueError("each state tensor must be (B, C)")
    path = resolve_backend(backend, k.device, cpu_path=True)
    if path == "triton":
        from . import triton as triton_path

        return triton_path.wkv_with_state(w, u, k, v, state)
    if path == "cpu":
        from . import cpu as cpu_path

        return cpu_path.wkv_with_state(w, u, k, v, state)
    return reference.wkv_with_state(w, u, k, v, state)


@opaque_to_compile
def wkv(
    w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str = "auto"
) -> torch.Tensor:
    """RWKV-4 WKV from an empty state; w, u: (C,), k, v: (B, T, C) -> (B, T, C)::

        wkv_t = (sum_{i<t} e^{-(t-1-i) w + k_i} v_i + e^{u + k_t} v_t)
              / (sum_{i<t} e^{-(t-1-i) w + k_i}     + e^{u + k_t})

    with w >= 0 the per-channel decay rate (pass exp(param) for a learned decay).
    """
    return wkv_with_state(w, u, k, v, None, backend)[0]
