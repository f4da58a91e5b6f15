"""Triton RWKV-4 WKV: one program per (batch, block of channels), sequential over time.

Forward: the running (num, den, max) recurrence of reference.py. Backward, per channel, in the
scaled units of the forward pass (true value = scaled value * e^{max}):

* pass 1 (forward in t) recomputes y_t, 1/den_t and the exponent of e^{u+k_t}, and accumulates
  dL/du and dL/dw, the latter through forward-mode derivatives of num and den with respect to w
  (d num' / dw = e^{-w} (d num / dw - num));
* pass 2 (reverse in t) carries G_num, G_den = dL/d(true num, den entering step t) and gives
  dk_t = g_t (v_t - y_t) e^{u+k_t} / den_t + e^{k_t} (G_num v_t + G_den), dv_t likewise.

The returned state is a redundant representation of (num e^max, den e^max); its gradient is
taken to depend on those two values only (true whenever the state is fed to another WKV call),
so a cotangent on ``max`` is not used.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .reference import EMPTY_MAX, WKVState, empty_state

_EMPTY_MAX = tl.constexpr(EMPTY_MAX)


@triton.jit
def _wkv_fwd_kernel(
    w_ptr,
    u_ptr,
    k_ptr,
    v_ptr,
    num_ptr,
    den_ptr,
    max_ptr,
    y_ptr,
    num_out_ptr,
    den_out_ptr,
    max_out_ptr,
    T,
    C,
    BLOCK_C: tl.constexpr,
):
    b = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = offs < C
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0)
    state = b * C + offs
    num = tl.load(num_ptr + state, mask=mask, other=0.0)
    den = tl.load(den_ptr + state, mask=mask, other=0.0)
    top = tl.load(max_ptr + state, mask=mask, other=0.0)
    base = b.to(tl.int64) * T * C + offs
    for t in range(T):
        k = tl.load(k_ptr + base + t * C, mask=mask, other=0.0)
        v = tl.load(v_ptr + base + t * C, mask=mask, other=0.0)
        m = tl.maximum(top, u + k)
        old = tl.exp(top - m)
        new = tl.exp(u + k - m)
        tl.store(y_ptr + base + t * C, (old * num + new * v) / (old * den + new), mask=mask)
        m = tl.maximum(top - w, k)
        old = tl.exp(top - w - m)
        new = tl.exp(k - m)
        num = old * num + new * v
        den = old * den + new
        top = m
    tl.store(num_out_ptr + state, num, mask=mask)
    tl.store(den_out_ptr + state, den, mask=mask)
    tl.store(max_out_ptr + state, top, mask=mask)


@triton.jit
def _wkv_bwd_kernel(
    w_ptr,
    u_ptr,
    k_ptr,
    v_ptr,
    num_ptr,
    den_ptr,
    max_ptr,
    gy_ptr,
    gnum_last_ptr,
    gden_last_ptr,
    max_last_ptr,
    scratch_ptr,
    gw_ptr,
    gu_ptr,
    gk_ptr,
    gv_ptr,
    gnum_ptr,
    gden_ptr,
    gmax_ptr,
    T,
    C,
    HAS_GSTATE: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    b = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = offs < C
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0)
    state = b * C + offs
    num0 = tl.load(num_ptr + state, mask=mask, other=0.0)
    den0 = tl.load(den_ptr + state, mask=mask, other=0.0)
    max0 = tl.load(max_ptr + state, mask=mask, other=0.0)
    base = b.to(tl.int64) * T * C + offs
    BTC = tl.num_programs(0).to(tl.int64) * T * C
    # scratch holds per step: y, 1 / den (scaled), exponent of e^{u + k} (scaled)
    y_s, iden_s, bonus_s = scratch_ptr, scratch_ptr + BTC, scratch_ptr + 2 * BTC

    num, den, top = num0, den0, max0
    dnum_dw = tl.zeros([BLOCK_C], dtype=w.dtype)
    dden_dw = tl.zeros([BLOCK_C], dtype=w.dtype)
    gw = tl.zeros([BLOCK_C], dtype=w.dtype)
    gu = tl.zeros([BLOCK_C], dtype=w.dtype)
    for t in range(T):
        k = tl.load(k_ptr + base + t * C, mask=mask, other=0.0)
        v = tl.load(v_ptr + base + t * C, mask=mask, other=0.0)
        gy = tl.load(gy_ptr + base + t * C, mask=mask, other=0.0)
        m = tl.maximum(top, u + k)
        old = tl.exp(top - m)
        new = tl.exp(u + k - m)
        iden = 1.0 / (old * den + new)
        y = (old * num + new * v) * iden
        tl.store(y_s + base + t * C, y, mask=mask)
        tl.store(iden_s + base + t * C, iden, mask=mask)
        tl.store(bonus_s + base + t * C, u + k - m, mask=mask)
        gw += gy * (dnum_dw - dden_dw * y) * iden * old
        gu += gy * (v - y) * new * iden
        m = tl.maximum(top - w, k)
        old = tl.exp(top - w - m)
        new = tl.exp(k - m)
        dnum_dw = old * (dnum_dw - num)
        dden_dw = old * (dden_dw - den)
        num = old * num + new * v
        den = old * den + new
        top = m

    if HAS_GSTATE:
        # cotangents on the returned (num, den) are per scaled unit: true ones carry e^{-max}
        g_num = tl.load(gnum_last_ptr + state, mask=mask, other=0.0)
        g_den = tl.load(gden_last_ptr + state, mask=mask, other=0.0)
        gw += g_num * dnum_dw + g_den * dden_dw
        scale = -tl.load(max_last_ptr + state, mask=mask, other=0.0)
    else:
        g_num = tl.zeros([BLOCK_C], dtype=w.dtype)
        g_den = tl.zeros([BLOCK_C], dtype=w.dtype)
        scale = tl.zeros([BLOCK_C], dtype=w.dtype) + _EMPTY_MAX
    tl.debug_barrier()
    for r in range(T):
        t = T - 1 - r
        k = tl.load(k_ptr + base + t * C, mask=mask, other=0.0)
        v = tl.load(v_ptr + base + t * C, mask=mask, other=0.0)
        gy = tl.load(gy_ptr + base + t * C, mask=mask, other=0.0)
        y = tl.load(y_s + base + t * C, mask=mask, other=0.0)
        iden = tl.load(iden_s + base + t * C, mask=mask, other=0.0)
        bonus = tl.load(bonus_s + base + t * C, mask=mask, other=0.0)
        g_self = gy * iden * tl.exp(bonus)
        g_later = tl.exp(k + scale)
        tl.store(gk_ptr + base + t * C, g_self * (v - y) + g_later * (g_num * v + g_den), mask=mask)
        tl.store(gv_ptr + base + t * C, g_self + g_later * g_num, mask=mask)
        m = tl.maximum(scale - w, bonus - k - u)
        old = tl.exp(scale - w - m)
        new = gy * iden * tl.exp(bonus - k - u - m)
        g_num = old * g_num + new
        g_den = old * g_den - new * y
        scale = m
    g_num0 = g_num * tl.exp(scale + max0)
    g_den0 = g_den * tl.exp(scale + max0)
    tl.store(gnum_ptr + state, g_num0, mask=mask)
    tl.store(gden_ptr + state, g_den0, mask=mask)
    tl.store(gmax_ptr + state, g_num0 * num0 + g_den0 * den0, mask=mask)
    tl.store(gw_ptr + state, gw, mask=mask)
    tl.store(gu_ptr + state, gu, mask=mask)


def _block_c(channels: int) -> int:
    return min(128, triton.next_power_of_2(channels))


class _WKV(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        w: torch.Tensor,
        u: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        num: torch.Tensor,
        den: torch.Tensor,
        top: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        ctx.set_materialize_grads(False)
        batch, length, channels = k.shape
        y = torch.empty_like(k)
        out = [torch.empty_like(num) for _ in range(3)]
        grid = (batch, triton.cdiv(channels, _block_c(channels)))
        _wkv_fwd_kernel[grid](
            w, u, k, v, num, den, top, y, *out, length, channels, BLOCK_C=_block_c(channels)
        )
        ctx.save_for_backward(w, u, k, v, num, den, top, out[2])
        return (y, *out)

    @staticmethod
    def backward(
        ctx: Any,
        gy: torch.Tensor | None,
        gnum_last: torch.Tensor | None,
        gden_last: torch.Tensor | None,
        _gmax_last: torch.Tensor | None,
    ) -> tuple[torch.Tensor, ...]:
        w, u, k, v, num, den, top, max_last = ctx.saved_tensors
        batch, length, channels = k.shape
        has_gstate = gnum_last is not None or gden_last is not None
        gnum_last = torch.zeros_like(num) if gnum_last is None else gnum_last.contiguous()
        gden_last = torch.zeros_like(num) if gden_last is None else gden_last.contiguous()
        gy = torch.zeros_like(k) if gy is None else gy.contiguous()
        scratch = torch.empty(3 * k.numel(), dtype=k.dtype, device=k.device)
        gw, gu, gnum, gden, gmax = (torch.empty_like(num) for _ in range(5))
        gk, gv = torch.empty_like(k), torch.empty_like(v)
        grid = (batch, triton.cdiv(channels, _block_c(channels)))
        _wkv_bwd_kernel[grid](
            w,
            u,
            k,
            v,
            num,
            den,
            top,
            gy,
            gnum_last,
            gden_last,
            max_last,
            scratch,
            gw,
            gu,
            gk,
            gv,
            gnum,
            gden,
            gmax,
            length,
            channels,
            HAS_GSTATE=has_gstate,
            BLOCK_C=_block_c(channels),
        )
        return gw.sum(0), gu.sum(0), gk, gv, gnum, gden, gmax


def wkv_with_state(
    w: torch.Tensor,
    u: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: WKVState | None = None,
) -> tuple[torch.Tensor, WKVState]:
    """Same contract as ``reference.wkv_with_state``."""
    dtype = torch.float64 if torch.float64 in (w.dtype, u.dtype, k.dtype, v.dtype) else (torch.float32)
    batch, _, channels = k.shape
    kc, vc = k.to(dtype).contiguous(), v.to(dtype).contiguous()
    if state is None:
        state = empty_state(batch, channels, kc)
    y, num, den, top = _WKV.apply(
        w.to(dtype).contiguous(),
        u.to(dtype).contiguous(),
        kc,
        vc,
        *(s.to(dtype).contiguous() for s in state),
    )
    return y.to(k.dtype), WKVState(num, den, top)


def wkv(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """WKV from the empty state. w, u: (C,); k, v: (B, T, C) -> (B, T, C)."""
    return wkv_with_state(w, u, k, v)[0]
