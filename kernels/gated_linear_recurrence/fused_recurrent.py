"""Triton gated linear recurrence, fused recurrent form (sequential over time).

One program per (batch*head, block of value channels) keeps its (dk, BLOCK_V) slice of the
state in registers. Backward, with cotangents do_t and dS_T of the final state:

* dq_t = S_t do_t (forward pass, recomputing S_t);
* dS_t = q_t do_t^T + diag(exp(g_{t+1})) dS_{t+1} (reverse pass), dk_t = dS_t v_t,
  dv_t = dS_t^T k_t, d initial_state = diag(exp(g_0)) dS_0;
* for the decays, with G_t = sum_{r<=t} g_r: dL/dG_t = q_t * dq_t - k_t * dk_t
  (+ rowsum(dS_T * S_T) at t = T-1), and dL/dg_r = sum_{t >= r} dL/dG_t, done in PyTorch.

``chunk_size`` does not apply to this form.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def _step_decay(g_ptr, g_offs, t, offs_k, mask_k, dk, PER_CHANNEL: tl.constexpr):
    """exp(g_t) as a (BLOCK_K,) vector."""
    if PER_CHANNEL:
        g = tl.load(g_ptr + g_offs + t * dk + offs_k, mask=mask_k, other=0.0)
    else:
        g = tl.load(g_ptr + g_offs + t + offs_k * 0, mask=mask_k, other=0.0)
    return tl.exp(g)


@triton.jit
def _glr_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    h0_ptr,
    o_ptr,
    hT_ptr,
    T,
    dk,
    dv,
    g_stride,
    HAS_H0: tl.constexpr,
    PER_CHANNEL: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    bh = tl.program_id(0).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k, mask_v = offs_k < dk, offs_v < dv
    mask = mask_k[:, None] & mask_v[None, :]
    state = bh * dk * dv + (offs_k * dv)[:, None] + offs_v[None, :]
    if HAS_H0:
        S = tl.load(h0_ptr + state, mask=mask, other=0.0)
    else:
        S = tl.zeros([BLOCK_K, BLOCK_V], dtype=q_ptr.dtype.element_ty)
    g_offs = bh * g_stride
    for t in range(T):
        q = tl.load(q_ptr + (bh * T + t) * dk + offs_k, mask=mask_k, other=0.0)
        k = tl.load(k_ptr + (bh * T + t) * dk + offs_k, mask=mask_k, other=0.0)
        v = tl.load(v_ptr + (bh * T + t) * dv + offs_v, mask=mask_v, other=0.0)
        decay = _step_decay(g_ptr, g_offs, t, offs_k, mask_k, dk, PER_CHANNEL)
        S = decay[:, None] * S + k[:, None] * v[None, :]
        tl.store(o_ptr + (bh * T + t) * dv + offs_v, tl.sum(q[:, None] * S, axis=0), mask=mask_v)
    tl.store(hT_ptr + state, S, mask=mask)


@triton.jit
def _glr_bwd_dq_kernel(
    k_ptr,
    v_ptr,
    g_ptr,
    h0_ptr,
    do_ptr,
    dq_ptr,
    T,
    dk,
    dv,
    g_stride,
    BH,
    HAS_H0: tl.constexpr,
    PER_CHANNEL: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    bh = tl.program_id(0).to(tl.int64)
    iv = tl.program_id(1)
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = iv * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k, mask_v = offs_k < dk, offs_v < dv
    mask = mask_k[:, None] & mask_v[None, :]
    if HAS_H0:
        S = tl.load(h0_ptr + bh * dk * dv + (offs_k * dv)[:, None] + offs_v[None, :], mask=mask, other=0.0)
    else:
        S = tl.zeros([BLOCK_K, BLOCK_V], dtype=k_ptr.dtype.element_ty)
    g_offs = bh * g_stride
    dq_part = dq_ptr + (iv * BH + bh) * T * dk  # partial over this block of value channels
    for t in range(T):
        k = tl.load(k_ptr + (bh * T + t) * dk + offs_k, mask=mask_k, other=0.0)
        v = tl.load(v_ptr + (bh * T + t) * dv + offs_v, mask=mask_v, other=0.0)
        do = tl.load(do_ptr + (bh * T + t) * dv + offs_v, mask=mask_v, other=0.0)
        decay = _step_decay(g_ptr, g_offs, t, offs_k, mask_k, dk, PER_CHANNEL)
        S = decay[:, None] * S + k[:, None] * v[None, :]
        tl.store(dq_part + t * dk + offs_k, tl.sum(S * do[None, :], axis=1), mask=mask_k)


@triton.jit
def _glr_bwd_dkv_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    do_ptr,
    dhT_ptr,
    dk_ptr,
    dv_ptr,
    dh0_ptr,
    T,
    dk,
    dv,
    g_stride,
    BH,
    HAS_DHT: tl.constexpr,
    PER_CHANNEL: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    bh = tl.program_id(0).to(tl.int64)
    iv = tl.program_id(1)
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = iv * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k, mask_v = offs_k < dk, offs_v < dv
    mask = mask_k[:, None] & mask_v[None, :]
    state = bh * dk * dv + (offs_k * dv)[:, None] + offs_v[None, :]
    if HAS_DHT:
        dS = tl.load(dhT_ptr + state, mask=mask, other=0.0)
    else:
        dS = tl.zeros([BLOCK_K, BLOCK_V], dtype=q_ptr.dtype.element_ty)
    g_offs = bh * g_stride
    dk_part = dk_ptr + (iv * BH + bh) * T * dk
    for r in range(T):
        t = T - 1 - r
        q = tl.load(q_ptr + (bh * T + t) * dk + offs_k, mask=mask_k, other=0.0)
        k = tl.load(k_ptr + (bh * T + t) * dk + offs_k, mask=mask_k, other=0.0)
        v = tl.load(v_ptr + (bh * T + t) * dv + offs_v, mask=mask_v, other=0.0)
        do = tl.load(do_ptr + (bh * T + t) * dv + offs_v, mask=mask_v, other=0.0)
        dS += q[:, None] * do[None, :]
        tl.store(dk_part + t * dk + offs_k, tl.sum(dS * v[None, :], axis=1), mask=mask_k)
        tl.store(dv_ptr + (bh * T + t) * dv + offs_v, tl.sum(dS * k[:, None], axis=0), mask=mask_v)
        decay = _step_decay(g_ptr, g_offs, t, offs_k, mask_k, dk, PER_CHANNEL)
        dS = decay[:, None] * dS
    tl.store(dh0_ptr + state, dS, mask=mask)


def _blocks(dk: int, dv: int) -> tuple[int, int]:
    block_k = triton.next_power_of_2(dk)
    return block_k, min(triton.next_power_of_2(dv), 64 if block_k <= 64 else 32)


class _GatedLinearRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, h0: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)
        batch, heads, length, dk = q.shape
        dv = v.shape[-1]
        block_k, block_v = _blocks(dk, dv)
        grid = (batch * heads, triton.cdiv(dv, block_v))
        o = torch.empty_like(v)
        hT = torch.empty(batch, heads, dk, dv, dtype=q.dtype, device=q.device)
        _glr_fwd_kernel[grid](
            q,
            k,
            v,
            g,
            h0 if h0 is not None else q,
            o,
            hT,
            length,
            dk,
            dv,
            g.stride(1),
            HAS_H0=h0 is not None,
            PER_CHANNEL=g.dim() == 4,
            BLOCK_K=block_k,
            BLOCK_V=block_v,
        )
        ctx.save_for_backward(q, k, v, g, h0, hT)
        ctx.config = (grid, block_k, block_v)
        return o, hT

    @staticmethod
    def backward(
        ctx: Any, do: torch.Tensor | None, dhT: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        q, k, v, g, h0, hT = ctx.saved_tensors
        grid, block_k, block_v = ctx.config
        batch, heads, length, dk = q.shape
        dv = v.shape[-1]
        per_channel = g.dim() == 4
        do = torch.zeros_like(v) if do is None else do.contiguous()
        n_v = grid[1]
        dq = torch.empty(n_v, batch, heads, length, dk, dtype=q.dtype, device=q.device)
        dk_ = torch.empty_like(dq)
        dv_ = torch.empty_like(v)
        dh0 = torch.empty_like(hT)
        flags = dict(PER_CHANNEL=per_channel, BLOCK_K=block_k, BLOCK_V=block_v)
        _glr_bwd_dq_kernel[grid](
            k,
            v,
            g,
            h0 if h0 is not None else q,
            do,
            dq,
            length,
            dk,
            dv,
            g.stride(1),
            batch * heads,
            HAS_H0=h0 is not None,
            **flags,
        )
        _glr_bwd_dkv_kernel[grid](
            q,
            k,
            v,
            g,
            do,
            dhT.contiguous() if dhT is not None else q,
            dk_,
            dv_,
            dh0,
            length,
            dk,
            dv,
            g.stride(1),
            batch * heads,
            HAS_DHT=dhT is not None,
            **flags,
        )
        dq, dk_ = dq.sum(0), dk_.sum(0)
        dG = q * dq - k * dk_
        if dhT is not None:
            dG[:, :, -1] += (dhT * hT).sum(-1)
        dg = dG.flip(2).cumsum(2).flip(2)
        return dq, dk_, dv_, dg if per_channel else dg.sum(-1), dh0 if h0 is not None else None


def gated_linear_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as ``reference.gated_linear_recurrence`` (``chunk_size`` unused)."""
    del chunk_size  # the fused recurrent form has no chunks
    dtype = torch.float64 if torch.float64 in (q.dtype, k.dtype, v.dtype) else torch.float32

    def cast(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(dtype).contiguous()

    o, hT = _GatedLinearRecurrence.apply(cast(q), cast(k), cast(v), cast(log_decay), cast(initial_state))
    return o.to(q.dtype), hT
