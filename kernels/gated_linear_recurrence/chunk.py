"""Triton gated linear recurrence, chunked form: parallel over time within a chunk.

Per (batch, head), ``S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T`` and ``o_t = S_t^T q_t``. The
sequence is cut into chunks of C steps (C a power of two, 16 to 64); H_c is the state entering
chunk c (H_0 = initial state) and, within a chunk, G_t = sum of g from the chunk start to t
(inclusive; G_last = G at the chunk's last step). Then::

    o_t     = (q_t * e^{G_t}) H_c + sum_{s <= t} A_ts v_s,   A_ts = sum_i q_ti k_si e^{G_ti - G_si}
    H_{c+1} = e^{G_last} * H_c + sum_s (k_s * e^{G_last - G_s}) v_s^T

Every exponent is a difference G_t - G_s with s <= t (or G itself), so it is <= 0 for g <= 0:
no factor exceeds 1 however strong the decay. Parallel and sequential parts:

* forward, ``_states_fwd``: one program per (batch*head, block of value channels) walks the
  chunks in order (sequential over T / C chunks, one (dk x C) @ (C x BV) matmul each) and
  stores every H_c;
* forward, ``_output_fwd``: one program per (chunk, batch*head, value block), all chunks in
  parallel: o = (q * e^G) @ H_c + A @ v;
* backward, ``_states_bwd``: reverse walk over chunks (sequential over T / C) for
  dH_c^out = dL/dH_{c+1} = e^{G_last,c+1} dH_{c+1}^out + (q * e^G)_{c+1}^T @ do_{c+1};
* backward, ``_grads_bwd``: one program per (chunk, batch*head), all chunks in parallel,
  value channels in blocks of at most 64::

      dA  = tril(do @ v^T)
      dq  = (dA, decayed) @ k + e^G * (do @ H_c^T)
      dk  = (dA, decayed)^T @ q + e^{G_last - G} * (v @ dH_c^out^T)
      dv  = A^T @ do + (k * e^{G_last - G}) @ dH_c^out

  and, in PyTorch, the decay gradient from the identity dL/dG_t = q_t dq_t - k_t dk_t
  (+ rowsum(dS_T * S_T) at the last step), dL/dg_r = sum_{t >= r} dL/dG_t (a reverse cumsum,
  G counted from step 0), which never divides by a decay.

With one decay per head, A is (q @ k^T) * e^{G_t - G_s}: two matmuls. With one decay per key
channel, the decay sits inside the sum over channels, so A (and dq, dk) are built one column
s at a time, (C x dk) elementwise work per column, as exact as the sequential form.
Matmuls run in full float32 (``input_precision="ieee"``), never TF32, so float32 results
match the reference to float32 rounding.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

MIN_CHUNK, MAX_CHUNK = 16, 64  # tl.dot needs every dimension >= 16


@triton.jit
def _decays(G_ptr, bh, c, NT, dk, offs_c, offs_k, mask_k, PER_CHANNEL: tl.constexpr, C: tl.constexpr):
    """G over chunk c, (C, BK) or (C,), and G at its last step, (BK,) or a scalar."""
    row0 = (bh * NT + c) * C
    if PER_CHANNEL:
        G = tl.load(G_ptr + (row0 + offs_c)[:, None] * dk + offs_k[None, :], mask=mask_k[None, :], other=0.0)
        G_last = tl.load(G_ptr + (row0 + C - 1) * dk + offs_k, mask=mask_k, other=0.0)
    else:
        G = tl.load(G_ptr + row0 + offs_c)
        G_last = tl.load(G_ptr + row0 + C - 1)
    return G, G_last


@triton.jit
def _rows(ptr, bh, c, T, width, offs_c, offs_x, mask_x, C: tl.constexpr):
    """A (C, BX) tile of a (BH, T, width) tensor at chunk c; zero past T and past width."""
    t = c * C + offs_c
    mask = (t < T)[:, None] & mask_x[None, :]
    return tl.load(ptr + (bh * T + t)[:, None] * width + offs_x[None, :], mask=mask, other=0.0)


@triton.jit
def _column(k_ptr, G_ptr, G, bh, c, s, T, NT, dk, offs_c, offs_k, mask_k, C: tl.constexpr):
    """Column s of the per-channel decay: E_ti = e^{G_ti - G_si} for t >= s, else 0, (C, BK);
    and k_s, (BK,)."""
    live = mask_k & (offs_k * 0 + c * C + s < T)  # vector compare: the interpreter needs it
    k_s = tl.load(k_ptr + (bh * T + c * C + s) * dk + offs_k, mask=live, other=0.0)
    G_s = tl.load(G_ptr + ((bh * NT + c) * C + s) * dk + offs_k, mask=mask_k, other=0.0)
    E = tl.exp(tl.where(offs_c[:, None] >= s, G - G_s[None, :], float("-inf")))
    return E, k_s


@triton.jit
def _states_fwd(
    k_ptr,
    v_ptr,
    G_ptr,
    h0_ptr,
    H_ptr,
    hT_ptr,
    T,
    NT,
    dk,
    dv,
    HAS_H0: tl.constexpr,
    PER_CHANNEL: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    bh = tl.program_id(0).to(tl.int64)
    offs_c = tl.arange(0, C)
    offs_k = tl.arange(0, BK)
    offs_v = tl.program_id(1) * BV + tl.arange(0, BV)
    mask_k, mask_v = offs_k < dk, offs_v < dv
    tile = (offs_k * dv)[:, None] + offs_v[None, :]
    tile_mask = mask_k[:, None] & mask_v[None, :]
    if HAS_H0:
        S = tl.load(h0_ptr + bh * dk * dv + tile, mask=tile_mask, other=0.0)
    else:
        S = tl.zeros([BK, BV], dtype=k_ptr.dtype.element_ty)
    for c in range(NT):
        tl.store(H_ptr + (bh * NT + c) * dk * dv + tile, S, mask=tile_mask)
        k = _rows(k_ptr, bh, c, T, dk, offs_c, offs_k, mask_k, C)
        v = _rows(v_ptr, bh, c, T, dv, offs_c, offs_v, mask_v, C)
        G, G_last = _decays(G_ptr, bh, c, NT, dk, offs_c, offs_k, mask_k, PER_CHANNEL, C)
        if PER_CHANNEL:
            k_to_end = k * tl.exp(G_last[None, :] - G)
            S = tl.exp(G_last)[:, None] * S
        else:
            k_to_end = k * tl.exp(G_last - G)[:, None]
            S = tl.exp(G_last) * S
        S += tl.dot(tl.trans(k_to_end), v, input_precision="ieee")
    tl.store(hT_ptr + bh * dk * dv + tile, S, mask=tile_mask)


@triton.jit
def _output_fwd(
    q_ptr,
    k_ptr,
    v_ptr,
    G_ptr,
    H_ptr,
    o_ptr,
    T,
    NT,
    dk,
    dv,
    PER_CHANNEL: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    c = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    offs_c = tl.arange(0, C)
    offs_k = tl.arange(0, BK)
    offs_v = tl.program_id(2) * BV + tl.arange(0, BV)
    mask_k, mask_v = offs_k < dk, offs_v < dv
    q = _rows(q_ptr, bh, c, T, dk, offs_c, offs_k, mask_k, C)
    v = _rows(v_ptr, bh, c, T, dv, offs_c, offs_v, mask_v, C)
    G, _ = _decays(G_ptr, bh, c, NT, dk, offs_c, offs_k, mask_k, PER_CHANNEL, C)
    causal = offs_c[:, None] >= offs_c[None, :]
    if PER_CHANNEL:
        A = tl.zeros([C, C], dtype=q.dtype)
        for s in range(C):
            E, k_s = _column(k_ptr, G_ptr, G, bh, c, s, T, NT, dk, offs_c, offs_k, mask_k, C)
            A = tl.where(offs_c[None, :] == s, tl.sum(q * k_s[None, :] * E, axis=1)[:, None], A)
        q_from_start = q * tl.exp(G)
    else:
        k = _rows(k_ptr, bh, c, T, dk, offs_c, offs_k, mask_k, C)
        decay = tl.exp(tl.where(causal, G[:, None] - G[None, :], float("-inf")))
        A = tl.dot(q, tl.trans(k), input_precision="ieee") * decay
        q_from_start = q * tl.exp(G)[:, None]
    H = tl.load(
        H_ptr + (bh * NT + c) * dk * dv + (offs_k * dv)[:, None] + offs_v[None, :],
        mask=mask_k[:, None] & mask_v[None, :],
        other=0.0,
    )
    o = tl.dot(q_from_start, H, input_precision="ieee") + tl.dot(A, v, input_precision="ieee")
    t = c * C + offs_c
    tl.store(o_ptr + (bh * T + t)[:, None] * dv + offs_v[None, :], o, mask=(t < T)[:, None] & mask_v[None, :])


@triton.jit
def _states_bwd(
    q_ptr,
    do_ptr,
    G_ptr,
    dhT_ptr,
    dH_ptr,
    dh0_ptr,
    T,
    NT,
    dk,
    dv,
    HAS_DHT: tl.constexpr,
    PER_CHANNEL: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    bh = tl.program_id(0).to(tl.int64)
    offs_c = tl.arange(0, C)
    offs_k = tl.arange(0, BK)
    offs_v = tl.program_id(1) * BV + tl.arange(0, BV)
    mask_k, mask_v = offs_k < dk, offs_v < dv
    tile = (offs_k * dv)[:, None] + offs_v[None, :]
    tile_mask = mask_k[:, None] & mask_v[None, :]
    if HAS_DHT:
        dS = tl.load(dhT_ptr + bh * dk * dv + tile, mask=tile_mask, other=0.0)
    else:
        dS = tl.zeros([BK, BV], dtype=q_ptr.dtype.element_ty)
    for i in range(NT):
        c = NT - 1 - i
        tl.store(dH_ptr + (bh * NT + c) * dk * dv + tile, dS, mask=tile_mask)
        q = _rows(q_ptr, bh, c, T, dk, offs_c, offs_k, mask_k, C)
        do = _rows(do_ptr, bh, c, T, dv, offs_c, offs_v, mask_v, C)
        G, G_last = _decays(G_ptr, bh, c, NT, dk, offs_c, offs_k, mask_k, PER_CHANNEL, C)
        if PER_CHANNEL:
            dS = tl.exp(G_last)[:, None] * dS
            q_from_start = q * tl.exp(G)
        else:
            dS = tl.exp(G_last) * dS
            q_from_start = q * tl.exp(G)[:, None]
        dS += tl.dot(tl.trans(q_from_start), do, input_precision="ieee")
    tl.store(dh0_ptr + bh * dk * dv + tile, dS, mask=tile_mask)


@triton.jit
def _grads_bwd(
    q_ptr,
    k_ptr,
    v_ptr,
    G_ptr,
    H_ptr,
    dH_ptr,
    do_ptr,
    dq_ptr,
    dk_ptr,
    dv_ptr,
    T,
    NT,
    dk,
    dv,
    PER_CHANNEL: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """dq, dk, dv of one chunk. Value channels come in blocks of BV: a first pass sums the
    products over them (dA, do H^T, v dH^T), a second writes dv, which needs A."""
    c = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    offs_c = tl.arange(0, C)
    offs_k = tl.arange(0, BK)
    mask_k = offs_k < dk
    q = _rows(q_ptr, bh, c, T, dk, offs_c, offs_k, mask_k, C)
    k = _rows(k_ptr, bh, c, T, dk, offs_c, offs_k, mask_k, C)
    G, G_last = _decays(G_ptr, bh, c, NT, dk, offs_c, offs_k, mask_k, PER_CHANNEL, C)
    causal = offs_c[:, None] >= offs_c[None, :]
    state = (bh * NT + c) * dk * dv + (offs_k * dv)[:, None]
    dA = tl.zeros([C, C], dtype=q.dtype)
    dq_state = tl.zeros([C, BK], dtype=q.dtype)  # do @ H_c^T
    dk_state = tl.zeros([C, BK], dtype=q.dtype)  # v @ dH_c^out^T
    for iv in range(tl.cdiv(dv, BV)):
        offs_v = iv * BV + tl.arange(0, BV)
        mask_v = offs_v < dv
        tile_mask = mask_k[:, None] & mask_v[None, :]
        v = _rows(v_ptr, bh, c, T, dv, offs_c, offs_v, mask_v, C)
        do = _rows(do_ptr, bh, c, T, dv, offs_c, offs_v, mask_v, C)
        H = tl.load(H_ptr + state + offs_v[None, :], mask=tile_mask, other=0.0)
        dH = tl.load(dH_ptr + state + offs_v[None, :], mask=tile_mask, other=0.0)
        dA += tl.dot(do, tl.trans(v), input_precision="ieee")
        dq_state += tl.dot(do, tl.trans(H), input_precision="ieee")
        dk_state += tl.dot(v, tl.trans(dH), input_precision="ieee")
    dA = tl.where(causal, dA, 0.0)
    if PER_CHANNEL:
        A = tl.zeros([C, C], dtype=q.dtype)
        dq = tl.zeros([C, BK], dtype=q.dtype)
        dk_ = tl.zeros([C, BK], dtype=q.dtype)
        for s in range(C):
            E, k_s = _column(k_ptr, G_ptr, G, bh, c, s, T, NT, dk, offs_c, offs_k, mask_k, C)
            A = tl.where(offs_c[None, :] == s, tl.sum(q * k_s[None, :] * E, axis=1)[:, None], A)
            dA_s = tl.sum(tl.where(offs_c[None, :] == s, dA, 0.0), axis=1)  # column s of dA
            dq += dA_s[:, None] * k_s[None, :] * E
            dk_s = tl.sum(dA_s[:, None] * q * E, axis=0)
            dk_ = tl.where(offs_c[:, None] == s, dk_s[None, :], dk_)
        from_start = tl.exp(G)
        to_end = tl.exp(G_last[None, :] - G)
    else:
        decay = tl.exp(tl.where(causal, G[:, None] - G[None, :], float("-inf")))
        A = tl.dot(q, tl.trans(k), input_precision="ieee") * decay
        dA_decayed = dA * decay
        dq = tl.dot(dA_decayed, k, input_precision="ieee")
        dk_ = tl.dot(tl.trans(dA_decayed), q, input_precision="ieee")
        from_start = tl.exp(G)[:, None]
        to_end = tl.exp(G_last - G)[:, None]
    dq += from_start * dq_state
    dk_ += to_end * dk_state
    t = c * C + offs_c
    rows = (bh * T + t)[:, None]
    live = (t < T)[:, None]
    tl.store(dq_ptr + rows * dk + offs_k[None, :], dq, mask=live & mask_k[None, :])
    tl.store(dk_ptr + rows * dk + offs_k[None, :], dk_, mask=live & mask_k[None, :])
    k_to_end = k * to_end
    for iv in range(tl.cdiv(dv, BV)):
        offs_v = iv * BV + tl.arange(0, BV)
        mask_v = offs_v < dv
        do = _rows(do_ptr, bh, c, T, dv, offs_c, offs_v, mask_v, C)
        dH = tl.load(dH_ptr + state + offs_v[None, :], mask=mask_k[:, None] & mask_v[None, :], other=0.0)
        dv_ = tl.dot(tl.trans(A), do, input_precision="ieee") + tl.dot(k_to_end, dH, input_precision="ieee")
        tl.store(dv_ptr + rows * dv + offs_v[None, :], dv_, mask=live & mask_v[None, :])


def chunk_length(chunk_size: int) -> int:
    """The kernel's chunk: ``chunk_size`` rounded up to a power of two, clamped to [16, 64]."""
    return min(MAX_CHUNK, max(MIN_CHUNK, triton.next_power_of_2(chunk_size)))


def _chunk_cumsum(g: torch.Tensor, T: int, chunk: int) -> torch.Tensor:
    """g (B, H, T[, dk]) -> G, the cumsum within each chunk, padded with g = 0 to whole chunks:
    (B*H, NT*C[, dk]). Past T, G stays at its value at T-1, so G_last is right for the last
    chunk too."""
    n_chunks = triton.cdiv(T, chunk)
    bh = g.shape[0] * g.shape[1]
    channels = g.shape[3:]  # (dk,) or ()
    g = F.pad(g, (0, 0) * len(channels) + (0, n_chunks * chunk - T))
    return g.reshape(bh, n_chunks, chunk, *channels).cumsum(2).reshape(bh, n_chunks * chunk, *channels)


def _block(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


class _ChunkedRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        h0: torch.Tensor | None,
        chunk: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)
        batch, heads, length, dk = q.shape
        dv = v.shape[-1]
        n_chunks = triton.cdiv(length, chunk)
        G = _chunk_cumsum(g, length, chunk).contiguous()
        block_k, block_v = _block(dk), min(_block(dv), 64)
        flags = dict(PER_CHANNEL=g.dim() == 4, C=chunk, BK=block_k, BV=block_v)
        bh = batch * heads
        H = torch.empty(bh, n_chunks, dk, dv, dtype=q.dtype, device=q.device)
        hT = torch.empty(batch, heads, dk, dv, dtype=q.dtype, device=q.device)
        o = torch.empty_like(v)
        n_v = triton.cdiv(dv, block_v)
        _states_fwd[(bh, n_v)](
            k,
            v,
            G,
            h0 if h0 is not None else q,
            H,
            hT,
            length,
            n_chunks,
            dk,
            dv,
            HAS_H0=h0 is not None,
            **flags,
        )
        _output_fwd[(n_chunks, bh, n_v)](q, k, v, G, H, o, length, n_chunks, dk, dv, **flags)
        ctx.save_for_backward(q, k, v, G, H, hT)
        ctx.shape = (chunk, n_chunks, g.dim() == 4, h0 is not None)
        return o, hT

    @staticmethod
    def backward(
        ctx: Any, do: torch.Tensor | None, dhT: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        q, k, v, G, H, hT = ctx.saved_tensors
        chunk, n_chunks, per_channel, has_h0 = ctx.shape
        batch, heads, length, dk = q.shape
        dv = v.shape[-1]
        bh = batch * heads
        do = torch.zeros_like(v) if do is None else do.contiguous()
        block_k, block_v = _block(dk), min(_block(dv), 64)
        flags = dict(PER_CHANNEL=per_channel, C=chunk, BK=block_k)
        dH = torch.empty_like(H)
        dh0 = torch.empty_like(hT)
        _states_bwd[(bh, triton.cdiv(dv, block_v))](
            q,
            do,
            G,
            dhT.contiguous() if dhT is not None else q,
            dH,
            dh0,
            length,
            n_chunks,
            dk,
            dv,
            HAS_DHT=dhT is not None,
            BV=block_v,
            **flags,
        )
        dq, dk_, dv_ = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        _grads_bwd[(n_chunks, bh)](
            q, k, v, G, H, dH, do, dq, dk_, dv_, length, n_chunks, dk, dv, BV=block_v, **flags
        )
        dG = q * dq - k * dk_
        if dhT is not None and length > 0:
            dG[:, :, -1] += (dhT * hT).sum(-1)
        dg = dG.flip(2).cumsum(2).flip(2)
        return dq, dk_, dv_, dg if per_channel else dg.sum(-1), dh0 if has_h0 else None, None


def gated_linear_recurrence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as ``reference.gated_linear_recurrence``; the chunk is
    ``chunk_length(chunk_size)`` (the result does not depend on it beyond rounding)."""
    dtype = torch.float64 if torch.float64 in (q.dtype, k.dtype, v.dtype) else torch.float32

    def cast(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(dtype).contiguous()

    o, hT = _ChunkedRecurrence.apply(
        cast(q), cast(k), cast(v), cast(log_decay), cast(initial_state), chunk_length(chunk_size)
    )
    return o.to(q.dtype), hT
