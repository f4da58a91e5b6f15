"""The one-element-state recurrence (dk = dv = 1): a fused C++ loop (``scalar_scan.cpp``), or a
step loop with its own backward where the C++ kernel cannot be built.

RG-LRU, the DNA strand cascade and the epigenetic marks each run one scalar state per
channel, ``s_t = a_t s_{t-1} + x_t`` with ``a_t = exp(g_t)``, ``x_t = k_t v_t``, ``o_t = q_t s_t``.
The chunked reference builds a (T, T) decay matrix per channel for that; on a CPU core the
loop below is about a hundred times faster at T = 64 (B = 32, 64 channels, forward and
backward: 1.6 ms against 235 ms). Backward, with ``c_t`` the total gradient reaching ``s_t``
(from ``o_t`` and from the future)::

    c_t = ds_t + a_{t+1} c_{t+1}          (c_{T-1} = ds_{T-1})
    dx_t = c_t,   da_t = c_t s_{t-1},   ds_{-1} = a_0 c_0

(``ds_{-1}`` is the initial state's gradient), so nothing is divided by a decay.

``scalar_scan.cpp`` fuses the whole op, forward in one call and backward in another: it reads
g, k, v, q in (B, T, H) layout (what the blocks' ``x.transpose(1, 2)[..., None]`` views
already are, so they need no copy), one batch row per task, channels innermost (vectorised);
chain rule ``dg_t = da_t a_t``, ``dk_t = c_t v_t``, ``dv_t = c_t k_t``, ``dq_t = do_t s_t``. In
the fallback loop the exponential, the products with q and k and the casts are ATen ops around
the loop, differentiated by autograd. Works on any device; ``auto`` takes it on CPU only (CUDA
has the Triton kernels, one launch for every step).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .._build import load_cpu_extension


def _extension() -> ModuleType | None:
    return load_cpu_extension("scalar_scan", Path(__file__).with_name("scalar_scan.cpp"))


def available() -> bool:
    """True when the C++ kernel is built (building it now if needed)."""
    return _extension() is not None


def _built() -> ModuleType:
    extension = _extension()
    if extension is None:
        raise RuntimeError("the C++ scalar scan is not built: check available() first")
    return extension


class _FusedScalarScan(torch.autograd.Function):
    """(g, k, v, q, s0) -> (o, final state) in ``scalar_scan.cpp``: g, k, v, q, o (B, T, H),
    s0 (B, H) or None, final (B, H); contiguous, one dtype."""

    @staticmethod
    def forward(
        ctx: Any,
        g: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        q: torch.Tensor,
        s0: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)
        o, states, final = _built().forward(g, k, v, q, s0)
        ctx.save_for_backward(g, k, v, q, s0, states)
        return o, final

    @staticmethod
    def backward(
        ctx: Any, d_o: torch.Tensor | None, d_final: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        g, k, v, q, s0, states = ctx.saved_tensors
        dg, dk, dv, dq, ds0 = _built().backward(
            g,
            k,
            v,
            q,
            s0,
            states,
            None if d_o is None else d_o.contiguous(),
            None if d_final is None else d_final.contiguous(),
            ctx.needs_input_grad[1] or ctx.needs_input_grad[3],
        )
        return (
            dg,
            dk if ctx.needs_input_grad[1] else None,
            dv,
            dq if ctx.needs_input_grad[3] else None,
            None if s0 is None else ds0,
        )


def _fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    batch, heads, length, _ = q.shape

    def channels_last(t: torch.Tensor) -> torch.Tensor:  # (B, H, T[, 1]) -> (B, T, H)
        return t.reshape(batch, heads, length).transpose(1, 2).to(dtype).contiguous()

    s0 = None if initial_state is None else initial_state.reshape(batch, heads).to(dtype).contiguous()
    o, final = _FusedScalarScan.apply(*(channels_last(t) for t in (log_decay, k, v, q)), s0)
    return o.transpose(1, 2)[..., None].to(q.dtype), final.reshape(batch, heads, 1, 1)


class _ScalarScan(torch.autograd.Function):
    """(a, x, s0) -> every state s, with a, x: (T, N) time-major, s0: (N,), s: (T, N)."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, x: torch.Tensor, s0: torch.Tensor) -> torch.Tensor:
        states = torch.empty_like(x)
        previous = s0
        for t in range(x.shape[0]):
            previous = torch.addcmul(x[t], a[t], previous, out=states[t])
        ctx.save_for_backward(a, states, s0)
        return states

    @staticmethod
    def backward(ctx: Any, d_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a, states, s0 = ctx.saved_tensors
        total = torch.empty_like(d_states)
        last = d_states.shape[0] - 1
        total[last] = d_states[last]
        for t in range(last - 1, -1, -1):
            torch.addcmul(d_states[t], a[t + 1], total[t + 1], out=total[t])
        before = torch.cat([s0[None], states[:-1]], 0)  # s_{t-1}
        return total * before, total, a[0] * total[0]


def gated_linear_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k, v: (B, H, T, 1); log_decay: (B, H, T) or (B, H, T, 1); initial_state: (B, H, 1, 1).

    Returns o (B, H, T, 1) in q's dtype and the final state (B, H, 1, 1) in the compute dtype
    (float32, or float64 when an input is float64), as ``kernels.gated_linear_recurrence``.
    The C++ kernel when it builds, else the step loop.
    """
    dtype_in = q.dtype
    dtype = torch.float64 if torch.float64 in (q.dtype, k.dtype, v.dtype) else torch.float32
    batch, heads, length, _ = q.shape
    if length == 0:
        state = (
            initial_state.to(dtype)
            if initial_state is not None
            else q.new_zeros(batch, heads, 1, 1, dtype=dtype)
        )
        return v.new_zeros(batch, heads, 0, 1, dtype=dtype_in), state
    if available():
        return _fused(q, k, v, log_decay, initial_state, dtype)

    def time_major(t: torch.Tensor) -> torch.Tensor:  # (B, H, T, ...) -> (T, B·H)
        return t.to(dtype).reshape(batch * heads, length).transpose(0, 1).contiguous()

    a = time_major(log_decay).exp()
    x = time_major(k) * time_major(v)
    s0 = (
        initial_state.to(dtype).reshape(batch * heads)
        if initial_state is not None
        else x.new_zeros(batch * heads)
    )
    states = _ScalarScan.apply(a, x, s0)  # (T, B·H)
    o = time_major(q) * states
    final = states[-1].reshape(batch, heads, 1, 1)
    return o.transpose(0, 1).reshape(batch, heads, length, 1).to(dtype_in), final
