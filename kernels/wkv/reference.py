"""RWKV-4 WKV in plain PyTorch: the ground truth for the Triton kernel.

With decay rate w >= 0 and bonus u, per channel::

    wkv_t = (sum_{i<t} e^{-(t-1-i) w + k_i} v_i + e^{u + k_t} v_t)
          / (sum_{i<t} e^{-(t-1-i) w + k_i}     + e^{u + k_t})

The running sums are carried as (num, den, max) with true numerator num * e^max and true
denominator den * e^max, so no exponential ever exceeds e^0 (k up to 100 does not overflow).
The empty state is (0, 0, -1e38). Computed in float32 (float64 for float64 inputs).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

EMPTY_MAX = -1e38  # log-scale of the empty state: e^{EMPTY_MAX} == 0 in float32 and float64


class WKVState(NamedTuple):
    """Running sums per (batch, channel): each (B, C)."""

    num: torch.Tensor
    den: torch.Tensor
    max: torch.Tensor


def empty_state(batch: int, channels: int, like: torch.Tensor) -> WKVState:
    """State before the first token."""
    zeros = like.new_zeros(batch, channels)
    return WKVState(zeros, zeros.clone(), torch.full_like(zeros, EMPTY_MAX))


def wkv_with_state(
    w: torch.Tensor,
    u: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: WKVState | None = None,
) -> tuple[torch.Tensor, WKVState]:
    """Per-step loop. w, u: (C,); k, v: (B, T, C); state: (num, den, max) each (B, C).

    Returns y: (B, T, C) in k's dtype and the state after the last token (compute dtype).
    """
    dtype = torch.float64 if torch.float64 in (w.dtype, u.dtype, k.dtype, v.dtype) else (torch.float32)
    batch, _, channels = k.shape
    w, u = w.to(dtype), u.to(dtype)
    if state is None:
        state = empty_state(batch, channels, k.to(dtype))
    num, den, top = (s.to(dtype) for s in state)
    ys = []
    for k_t, v_t in zip(k.to(dtype).unbind(1), v.to(dtype).unbind(1), strict=True):
        bonus = u + k_t
        m = torch.maximum(top, bonus)
        old, new = torch.exp(top - m), torch.exp(bonus - m)
        ys.append((old * num + new * v_t) / (old * den + new))
        decayed = top - w
        m = torch.maximum(decayed, k_t)
        old, new = torch.exp(decayed - m), torch.exp(k_t - m)
        num, den, top = old * num + new * v_t, old * den + new, m
    y = torch.stack(ys, dim=1) if ys else k.new_zeros(k.shape, dtype=dtype)
    return y.to(k.dtype), WKVState(num, den, top)


def wkv(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """WKV from the empty state. w, u: (C,); k, v: (B, T, C) -> (B, T, C)."""
    return wkv_with_state(w, u, k, v)[0]
