"""RWKV-4 WKV for CPU tensors: a fused C++ loop (``wkv.cpp``), or a step loop with a
hand-written backward where the C++ kernel cannot be built.

The reference (reference.py) is the per-step loop differentiated by autograd: about twenty
small ops a step, each recorded and replayed backwards. Here the forward is the reference's
recurrence without a graph, and the backward is the Triton kernel's (triton.py, whose docstring
derives it), in two passes over time:

* pass 1 (forward in t) recomputes y_t, 1/den_t and the exponent of e^{u+k_t}, and accumulates
  dL/du and dL/dw, the latter through forward-mode derivatives of num and den with respect to w;
* pass 2 (reverse in t) carries G_num, G_den = dL/d(true num, den entering step t) and gives
  dk_t and dv_t.

``wkv.cpp`` runs both, one batch row per task with the channels innermost (vectorised): the
forward in one call, both backward passes in another. The fallback (``_WKVLoop``) runs the
reference's loop and the two passes as PyTorch ops over (B, C), a step at a time.

As in triton.py, the returned state's gradient is taken through (num e^max, den e^max) only.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .._build import load_cpu_extension
from . import reference
from .reference import EMPTY_MAX, WKVState, empty_state


def _extension() -> ModuleType | None:
    return load_cpu_extension("wkv", Path(__file__).with_name("wkv.cpp"))


def available() -> bool:
    """True when the C++ kernel is built (building it now if needed)."""
    return _extension() is not None


def _built() -> ModuleType:
    extension = _extension()
    if extension is None:
        raise RuntimeError("the C++ WKV kernel is not built: check available() first")
    return extension


class _WKVFused(torch.autograd.Function):
    """(w, u, k, v, num, den, max) -> (y, num', den', max') in ``wkv.cpp``; the incoming state
    is all three tensors or None (empty); every tensor contiguous, one dtype."""

    @staticmethod
    def forward(
        ctx: Any,
        w: torch.Tensor,
        u: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        num: torch.Tensor | None,
        den: torch.Tensor | None,
        top: torch.Tensor | None,
    ) -> tuple[torch.Tensor, ...]:
        ctx.set_materialize_grads(False)
        y, num_last, den_last, max_last = _built().forward(w, u, k, v, num, den, top)
        ctx.save_for_backward(w, u, k, v, num, den, top)
        return y, num_last, den_last, max_last

    @staticmethod
    def backward(
        ctx: Any,
        gy: torch.Tensor | None,
        gnum_last: torch.Tensor | None,
        gden_last: torch.Tensor | None,
        _gmax_last: torch.Tensor | None,
    ) -> tuple[torch.Tensor | None, ...]:
        w, u, k, v, num0, den0, max0 = ctx.saved_tensors
        gy = torch.zeros_like(k) if gy is None else gy.contiguous()
        gw, gu, gk, gv, gnum0, gden0, gmax0 = _built().backward(
            w,
            u,
            k,
            v,
            num0,
            den0,
            max0,
            gy,
            None if gnum_last is None else gnum_last.contiguous(),
            None if gden_last is None else gden_last.contiguous(),
        )
        if num0 is None:
            return gw, gu, gk, gv, None, None, None
        return gw, gu, gk, gv, gnum0, gden0, gmax0


class _WKVLoop(torch.autograd.Function):
    """(w, u, k, v, num, den, max) -> (y, num', den', max'); k, v: (B, T, C). The forward is
    the reference's loop (no graph is recorded inside a Function's forward)."""

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
        y, (num_last, den_last, max_last) = reference.wkv_with_state(w, u, k, v, WKVState(num, den, top))
        ctx.save_for_backward(w, u, k, v, num, den, top, max_last)
        return y, num_last, den_last, max_last

    @staticmethod
    def backward(
        ctx: Any,
        gy: torch.Tensor | None,
        gnum_last: torch.Tensor | None,
        gden_last: torch.Tensor | None,
        _gmax_last: torch.Tensor | None,
    ) -> tuple[torch.Tensor, ...]:
        w, u, k, v, num0, den0, max0, max_last = ctx.saved_tensors
        gy = torch.zeros_like(k) if gy is None else gy
        length = k.shape[1]
        ys, idens, bonuses = torch.empty_like(k), torch.empty_like(k), torch.empty_like(k)
        num, den, top = num0, den0, max0
        dnum_dw, dden_dw = torch.zeros_like(num0), torch.zeros_like(num0)
        gw, gu = torch.zeros_like(num0), torch.zeros_like(num0)
        for t in range(length):  # pass 1
            k_t, v_t, gy_t = k[:, t], v[:, t], gy[:, t]
            m = torch.maximum(top, u + k_t)
            old, new = torch.exp(top - m), torch.exp(u + k_t - m)
            iden = 1.0 / (old * den + new)
            y = (old * num + new * v_t) * iden
            ys[:, t], idens[:, t], bonuses[:, t] = y, iden, u + k_t - m
            gw += gy_t * (dnum_dw - dden_dw * y) * iden * old
            gu += gy_t * (v_t - y) * new * iden
            m = torch.maximum(top - w, k_t)
            old, new = torch.exp(top - w - m), torch.exp(k_t - m)
            dnum_dw, dden_dw = old * (dnum_dw - num), old * (dden_dw - den)
            num, den, top = old * num + new * v_t, old * den + new, m
        if gnum_last is not None or gden_last is not None:
            # cotangents on the returned (num, den) are per scaled unit: true ones carry e^{-max}
            g_num = torch.zeros_like(num0) if gnum_last is None else gnum_last
            g_den = torch.zeros_like(num0) if gden_last is None else gden_last
            gw += g_num * dnum_dw + g_den * dden_dw
            scale = -max_last
        else:
            g_num, g_den = torch.zeros_like(num0), torch.zeros_like(num0)
            scale = torch.full_like(num0, EMPTY_MAX)
        gk, gv = torch.empty_like(k), torch.empty_like(v)
        for t in range(length - 1, -1, -1):  # pass 2
            k_t, v_t, y, iden, bonus = k[:, t], v[:, t], ys[:, t], idens[:, t], bonuses[:, t]
            g_self = gy[:, t] * iden * torch.exp(bonus)
            g_later = torch.exp(k_t + scale)
            gk[:, t] = g_self * (v_t - y) + g_later * (g_num * v_t + g_den)
            gv[:, t] = g_self + g_later * g_num
            m = torch.maximum(scale - w, bonus - k_t - u)
            old = torch.exp(scale - w - m)
            new = gy[:, t] * iden * torch.exp(bonus - k_t - u - m)
            g_num, g_den = old * g_num + new, old * g_den - new * y
            scale = m
        g_num0, g_den0 = g_num * torch.exp(scale + max0), g_den * torch.exp(scale + max0)
        return gw.sum(0), gu.sum(0), gk, gv, g_num0, g_den0, g_num0 * num0 + g_den0 * den0


def wkv_with_state(
    w: torch.Tensor,
    u: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: WKVState | None = None,
) -> tuple[torch.Tensor, WKVState]:
    """Same contract as ``reference.wkv_with_state``: the C++ kernel when it builds, else the
    step loop."""
    dtype = torch.float64 if torch.float64 in (w.dtype, u.dtype, k.dtype, v.dtype) else torch.float32
    if k.shape[1] == 0:  # nothing to step: the reference returns the state as given
        return reference.wkv_with_state(w, u, k, v, state)
    if available():
        w, u, kc, vc = (t.to(dtype).contiguous() for t in (w, u, k, v))
        given = (None, None, None) if state is None else (s.to(dtype).contiguous() for s in state)
        y, num, den, top = _WKVFused.apply(w, u, kc, vc, *given)
        return y.to(k.dtype), WKVState(num, den, top)
    kc, vc = k.to(dtype), v.to(dtype)
    if state is None:
        state = empty_state(k.shape[0], k.shape[2], kc)
    y, num, den, top = _WKVLoop.apply(w.to(dtype), u.to(dtype), kc, vc, *(s.to(dtype) for s in state))
    return y.to(k.dtype), WKVState(num, den, top)
