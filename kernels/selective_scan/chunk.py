"""Triton selective scan, chunked: parallel over time within chunks, states passed between them.

Per (batch, channel d), with a_t = exp(dt_t A_d) and b_t = dt_t u_t B_t (vectors of size N)::

    h_t = a_t * h_{t-1} + b_t,      y_t = <C_t, h_t> + D_d u_t

The sequence is cut into chunks of C steps (a power of two). Within a chunk, the states come
from one associative scan over time of the pairs (a_t, b_t) with
``(a1, b1) . (a2, b2) = (a1 a2, a2 b1 + b2)``: every step of the chunk at once, from a zero
state, giving h_t^local and P_t = a_start ... a_t. The state entering chunk c, H_c, then gives
``h_t = P_t H_c + h_t^local``. Only products of decays <= 1 appear: nothing is divided by a
decay nor exponentiated upwards. What runs in parallel and what in sequence:

* ``_chunk_fwd`` (parallel over batch, channel blocks and chunks): the chunk's end state from
  zero, U_c, and its total decay P_c; with the states known, the outputs y;
* ``_pass_states`` (parallel over batch, channels and N; sequential over the T / C chunks,
  one multiply-add each): H_{c+1} = P_c H_c + U_c, and in reverse for the backward pass;
* backward, with x_t = dL/dh_t in total (from y_t and from the future)::

      x_t = dy_t C_t + a_{t+1} x_{t+1},       x at the chunk's end += dL/dH_{c+1}

  a reverse associative scan over the chunk (``_chunk_bwd_start``: from zero, giving
  dU_c = a_start x_start, the gradient the chunk sends to its entering state;
  ``_pass_states`` reversed: dL/dH_c = P_c dL/dH_{c+1} + dU_c); then ``_chunk_bwd``
  (parallel over batch, channel blocks, chunks) recomputes h_{t-1} by an exclusive scan and::

      ddt_t = sum_n x_t (A a_t h_{t-1} + u_t B_t)        dA  += x_t a_t h_{t-1} dt_t
      du_t  = dt_t <x_t, B_t> + D dy_t                  dB_t += x_t dt_t u_t    dC_t += dy_t h_t

  dB, dC are summed over the program's channel block (which never straddles a group) before
  an atomic add; dA and constant dB/dC rows are added atomically across batch and chunks.

Within a program the channels of its block are taken one after the other (a (C, N) tile each).
Step-size preprocessing (bias, softplus) and the gate are ATen ops around this core
(``shapes.fused_selective_scan``), as for the other fused backends.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .shapes import block_d as _block_d
from .shapes import from_time_major, fused_selective_scan, time_major
from .shapes import groups as _groups

CHUNK = 64  # steps per chunk (a power of two); shorter sequences use the next power of two >= L
PASS_BLOCK = 256  # (batch, channel, state) elements per program of the state-passing kernel


@triton.jit
def _combine(a1, b1, a2, b2):
    """Compose h -> a1 h + b1, then h -> a2 h + b2."""
    return a1 * a2, a2 * b1 + b2


@triton.jit
def _operand_tile(M_ptr, b, d0, t, live, offs_n, mask_n, dim, L, N, groups):
    """A variable B or C for the block's group at steps t: (C, BN), zero where not live."""
    g = d0 // (dim // groups)
    ptrs = M_ptr + ((b * groups + g) * L + t).to(tl.int64)[:, None] * N + offs_n[None, :]
    return tl.load(ptrs, mask=live[:, None] & mask_n[None, :], other=0.0)


@triton.jit
def _operand(M_ptr, tile, d, offs_n, mask_n, N, VARIABLE: tl.constexpr):
    """Channel d's B or C: the block's tile when variable, else its (1, BN) constant row."""
    if VARIABLE:
        return tile
    return tl.load(M_ptr + d * N + offs_n, mask=mask_n, other=0.0)[None, :]


@triton.jit
def _last_row(x, offs_c, C: tl.constexpr):
    return tl.sum(tl.where(offs_c[:, None] == C - 1, x, 0.0), axis=0)


@triton.jit
def _chunk_fwd(
    u_ptr,
    dt_ptr,
    A_ptr,
    B_ptr,
    C_ptr,
    D_ptr,
    H_ptr,
    y_ptr,
    U_ptr,
    P_ptr,
    dim,
    L,
    N,
    NT,
    groups_B,
    groups_C,
    WITH_STATE: tl.constexpr,
    HAS_D: tl.constexpr,
    VAR_B: tl.constexpr,
    VAR_C: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BN: tl.constexpr,
    C: tl.constexpr,
):
    """WITH_STATE: y from the entering states H; else the chunk's U (end state from zero) and
    P (total decay), both (batch*dim, NT, N)."""
    b = tl.program_id(0)
    d0 = tl.program_id(1) * BLOCK_D
    c = tl.program_id(2)
    offs_c = tl.arange(0, C)
    offs_n = tl.arange(0, BN)
    mask_n = offs_n < N
    t = c * C + offs_c
    live = t < L
    if VAR_B:
        B_tile = _operand_tile(B_ptr, b, d0, t, live, offs_n, mask_n, dim, L, N, groups_B)
    else:
        B_tile = tl.zeros([C, BN], dtype=u_ptr.dtype.element_ty)
    if VAR_C:
        C_tile = _operand_tile(C_ptr, b, d0, t, live, offs_n, mask_n, dim, L, N, groups_C)
    else:
        C_tile = tl.zeros([C, BN], dtype=u_ptr.dtype.element_ty)
    for i in range(BLOCK_D):
        d = d0 + i
        row = (b * dim + d).to(tl.int64)
        # dt = 0, u = 0 past L: the step is the identity, so a chunk's last row is h_{L-1}
        dt = tl.load(dt_ptr + row * L + t, mask=live, other=0.0)
        u = tl.load(u_ptr + row * L + t, mask=live, other=0.0)
        A = tl.load(A_ptr + d * N + offs_n, mask=mask_n, other=0.0)
        B_d = _operand(B_ptr, B_tile, d, offs_n, mask_n, N, VAR_B)
        P, h = tl.associative_scan((tl.exp(dt[:, None] * A[None, :]), (dt * u)[:, None] * B_d), 0, _combine)
        state = (row * NT + c) * N + offs_n
        if WITH_STATE:
            H = tl.load(H_ptr + state, mask=mask_n, other=0.0)
            h = P * H[None, :] + h
            y = tl.sum(h * _operand(C_ptr, C_tile, d, offs_n, mask_n, N, VAR_C), axis=1)
            if HAS_D:
                y += tl.load(D_ptr + d) * u
            tl.store(y_ptr + row * L + t, y, mask=live)
        else:
            tl.store(U_ptr + state, _last_row(h, offs_c, C), mask=mask_n)
            tl.store(P_ptr + state, _last_row(P, offs_c, C), mask=mask_n)


@triton.jit
def _pass_states(
    P_ptr,
    U_ptr,
    start_ptr,
    H_ptr,
    end_ptr,
    total,
    N,
    NT,
    HAS_START: tl.constexpr,
    REVERSE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """For every (batch, channel, n): H[c] = state before chunk c's update, then
    state = P[c] * state + U[c], over c in order (or in reverse); ``end`` gets the result."""
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = e < total
    base = (e // N).to(tl.int64) * NT * N + e % N
    if HAS_START:
        h = tl.load(start_ptr + e, mask=mask, other=0.0)
    else:
        h = tl.zeros([BLOCK], dtype=P_ptr.dtype.element_ty)
    for i in range(NT):
        if REVERSE:
            c = NT - 1 - i
        else:
            c = i
        tl.store(H_ptr + base + c * N, h, mask=mask)
        h = tl.load(P_ptr + base + c * N, mask=mask, other=1.0) * h + tl.load(
            U_ptr + base + c * N, mask=mask, other=0.0
        )
    tl.store(end_ptr + e, h, mask=mask)


@triton.jit
def _adjoint(dt_ptr, dy_ptr, row, t, live, A, C_d, dH_end, offs_c, L, C: tl.constexpr):
    """x_t = dL/dh_t over the chunk: x_t = dy_t C_t + a_{t+1} x_{t+1}, x_end += dH_end. (C, BN)."""
    later = (offs_c + 1 < C) & (t + 1 < L)
    dt_next = tl.load(dt_ptr + row * L + t + 1, mask=later, other=0.0)
    dy = tl.load(dy_ptr + row * L + t, mask=live, other=0.0)
    source = dy[:, None] * C_d + tl.where(offs_c[:, None] == C - 1, dH_end[None, :], 0.0)
    _, x = tl.associative_scan((tl.exp(dt_next[:, None] * A[None, :]), source), 0, _combine, reverse=True)
    return x, dy


@triton.jit
def _chunk_bwd_start(
    dt_ptr,
    A_ptr,
    C_ptr,
    dy_ptr,
    dU_ptr,
    dim,
    L,
    N,
    NT,
    groups_C,
    VAR_C: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BN: tl.constexpr,
    C: tl.constexpr,
):
    """dU_c = a_start x_start with nothing arriving from later chunks: (batch*dim, NT, N)."""
    b = tl.program_id(0)
    d0 = tl.program_id(1) * BLOCK_D
    c = tl.program_id(2)
    offs_c = tl.arange(0, C)
    offs_n = tl.arange(0, BN)
    mask_n = offs_n < N
    t = c * C + offs_c
    live = t < L
    if VAR_C:
        C_tile = _operand_tile(C_ptr, b, d0, t, live, offs_n, mask_n, dim, L, N, groups_C)
    else:
        C_tile = tl.zeros([C, BN], dtype=dt_ptr.dtype.element_ty)
    zero = tl.zeros([BN], dtype=dt_ptr.dtype.element_ty)
    for i in range(BLOCK_D):
        d = d0 + i
        row = (b * dim + d).to(tl.int64)
        A = tl.load(A_ptr + d * N + offs_n, mask=mask_n, other=0.0)
        C_d = _operand(C_ptr, C_tile, d, offs_n, mask_n, N, VAR_C)
        x, _ = _adjoint(dt_ptr, dy_ptr, row, t, live, A, C_d, zero, offs_c, L, C)
        dt_first = tl.load(dt_ptr + row * L + c * C)
        x_first = tl.sum(tl.where(offs_c[:, None] == 0, x, 0.0), axis=0)
        tl.store(dU_ptr + (row * NT + c) * N + offs_n, tl.exp(dt_first * A) * x_first, mask=mask_n)


@triton.jit
def _chunk_bwd(
    u_ptr,
    dt_ptr,
    A_ptr,
    B_ptr,
    C_ptr,
    D_ptr,
    H_ptr,
    dH_ptr,
    dy_ptr,
    du_ptr,
    ddt_ptr,
    dA_ptr,
    dB_ptr,
    dC_ptr,
    dim,
    L,
    N,
    NT,
    groups_B,
    groups_C,
    HAS_D: tl.constexpr,
    VAR_B: tl.constexpr,
    VAR_C: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BN: tl.constexpr,
    C: tl.constexpr,
):
    b = tl.program_id(0)
    d0 = tl.program_id(1) * BLOCK_D
    c = tl.program_id(2)
    offs_c = tl.arange(0, C)
    offs_n = tl.arange(0, BN)
    mask_n = offs_n < N
    t = c * C + offs_c
    live = t < L
    earlier = (offs_c >= 1) & live  # step t-1 lies in this chunk
    zeros = tl.zeros([C, BN], dtype=u_ptr.dtype.element_ty)
    if VAR_B:
        B_tile = _operand_tile(B_ptr, b, d0, t, live, offs_n, mask_n, dim, L, N, groups_B)
        B_prev_tile = _operand_tile(B_ptr, b, d0, t - 1, earlier, offs_n, mask_n, dim, L, N, groups_B)
    else:
        B_tile, B_prev_tile = zeros, zeros
    if VAR_C:
        C_tile = _operand_tile(C_ptr, b, d0, t, live, offs_n, mask_n, dim, L, N, groups_C)
    else:
        C_tile = zeros
    dB_block, dC_block = zeros, zeros
    for i in range(BLOCK_D):
        d = d0 + i
        row = (b * dim + d).to(tl.int64)
        state = (row * NT + c) * N + offs_n
        A = tl.load(A_ptr + d * N + offs_n, mask=mask_n, other=0.0)
        B_d = _operand(B_ptr, B_tile, d, offs_n, mask_n, N, VAR_B)
        B_prev = _operand(B_ptr, B_prev_tile, d, offs_n, mask_n, N, VAR_B)
        C_d = _operand(C_ptr, C_tile, d, offs_n, mask_n, N, VAR_C)
        dt = tl.load(dt_ptr + row * L + t, mask=live, other=0.0)
        u = tl.load(u_ptr + row * L + t, mask=live, other=0.0)
        # h_{t-1}: an inclusive scan of the steps shifted by one (identity at the chunk start)
        dt_prev = tl.load(dt_ptr + row * L + t - 1, mask=earlier, other=0.0)
        u_prev = tl.load(u_ptr + row * L + t - 1, mask=earlier, other=0.0)
        P_prev, h_prev = tl.associative_scan(
            (tl.exp(dt_prev[:, None] * A[None, :]), (dt_prev * u_prev)[:, None] * B_prev), 0, _combine
        )
        h_prev = P_prev * tl.load(H_ptr + state, mask=mask_n, other=0.0)[None, :] + h_prev
        decayed = tl.exp(dt[:, None] * A[None, :]) * h_prev  # a_t h_{t-1}
        dH_end = tl.load(dH_ptr + state, mask=mask_n, other=0.0)
        x, dy = _adjoint(dt_ptr, dy_ptr, row, t, live, A, C_d, dH_end, offs_c, L, C)
        ddt = tl.sum(x * (A[None, :] * decayed + u[:, None] * B_d), axis=1)
        du = dt * tl.sum(x * B_d, axis=1)
        if HAS_D:
            du += tl.load(D_ptr + d) * dy
        tl.store(ddt_ptr + row * L + t, ddt, mask=live)
        tl.store(du_ptr + row * L + t, du, mask=live)
        tl.atomic_add(dA_ptr + d * N + offs_n, tl.sum(x * decayed * dt[:, None], axis=0), mask=mask_n)
        dB = x * (dt * u)[:, None]
        dC = dy[:, None] * (decayed + (dt * u)[:, None] * B_d)  # dy_t h_t
        if VAR_B:
            dB_block += dB
        else:
            tl.atomic_add(dB_ptr + d * N + offs_n, tl.sum(dB, axis=0), mask=mask_n)
        if VAR_C:
            dC_block += dC
        else:
            tl.atomic_add(dC_ptr + d * N + offs_n, tl.sum(dC, axis=0), mask=mask_n)
    tile_mask = live[:, None] & mask_n[None, :]
    if VAR_B:
        g = d0 // (dim // groups_B)
        ptrs = dB_ptr + ((b * groups_B + g) * L + t).to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.atomic_add(ptrs, dB_block, mask=tile_mask)
    if VAR_C:
        g = d0 // (dim // groups_C)
        ptrs = dC_ptr + ((b * groups_C + g) * L + t).to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.atomic_add(ptrs, dC_block, mask=tile_mask)


def chunk_length(length: int) -> int:
    """Steps per chunk: ``CHUNK``, or the next power of two >= length when that is shorter."""
    return min(CHUNK, triton.next_power_of_2(max(length, 1)))


def _pass(
    P: torch.Tensor, U: torch.Tensor, start: torch.Tensor | None, reverse: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """States between chunks: (before each chunk's update, (rows, NT, N); end, (rows*N,))."""
    rows, n_chunks, state = P.shape
    H = torch.empty_like(P)
    end = torch.empty(rows * state, dtype=P.dtype, device=P.device)
    total = rows * state
    _pass_states[(triton.cdiv(total, PASS_BLOCK),)](
        P,
        U,
        start if start is not None else P,
        H,
        end,
        total,
        state,
        n_chunks,
        HAS_START=start is not None,
        REVERSE=reverse,
        BLOCK=PASS_BLOCK,
    )
    return H, end


class _ScanCore(torch.autograd.Function):
    """(u, dt, A, B, C, D, h0) -> (y = <C, h> + D u, last state), all in one float dtype."""

    @staticmethod
    def forward(
        ctx: Any,
        u: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        D: torch.Tensor | None,
        h0: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)
        batch, dim, length = u.shape
        state = A.shape[1]
        Bk, Ck = time_major(B), time_major(C)
        chunk = chunk_length(length)
        n_chunks = triton.cdiv(length, chunk)
        block_d = _block_d(dim, _groups(Bk), _groups(Ck))
        grid = (batch, dim // block_d, n_chunks)
        common = dict(
            VAR_B=B.dim() > 2,
            VAR_C=C.dim() > 2,
            BLOCK_D=block_d,
            BN=triton.next_power_of_2(state),
            C=chunk,
        )
        sizes = (dim, length, state, n_chunks, _groups(Bk), _groups(Ck))
        U = torch.empty(batch * dim, n_chunks, state, dtype=u.dtype, device=u.device)
        P = torch.empty_like(U)
        D_arg = D if D is not None else u
        _chunk_fwd[grid](u, dt, A, Bk, Ck, D_arg, U, u, U, P, *sizes, WITH_STATE=False, HAS_D=False, **common)
        H, last = _pass(P, U, h0, reverse=False)
        y = torch.empty_like(u)
        _chunk_fwd[grid](
            u, dt, A, Bk, Ck, D_arg, H, y, U, P, *sizes, WITH_STATE=True, HAS_D=D is not None, **common
        )
        ctx.save_for_backward(u, dt, A, Bk, Ck, D, H, P)
        ctx.config = (B.shape, C.shape, h0 is not None, grid, common, sizes)
        return y, last.view(batch, dim, state)

    @staticmethod
    def backward(
        ctx: Any, dy: torch.Tensor | None, dlast: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        u, dt, A, Bk, Ck, D, H, P = ctx.saved_tensors
        B_shape, C_shape, has_h0, grid, common, sizes = ctx.config
        dy = torch.zeros_like(u) if dy is None else dy.contiguous()
        dU = torch.empty_like(H)
        _chunk_bwd_start[grid](
            dt,
            A,
            Ck,
            dy,
            dU,
            sizes[0],
            sizes[1],
            sizes[2],
            sizes[3],
            sizes[5],
            VAR_C=common["VAR_C"],
            BLOCK_D=common["BLOCK_D"],
            BN=common["BN"],
            C=common["C"],
        )
        dH, dh0 = _pass(P, dU, None if dlast is None else dlast.contiguous(), reverse=True)
        du, ddt = torch.empty_like(u), torch.empty_like(u)
        dA, dBk, dCk = torch.zeros_like(A), torch.zeros_like(Bk), torch.zeros_like(Ck)
        _chunk_bwd[grid](
            u,
            dt,
            A,
            Bk,
            Ck,
            D if D is not None else u,
            H,
            dH,
            dy,
            du,
            ddt,
            dA,
            dBk,
            dCk,
            *sizes,
            HAS_D=D is not None,
            **common,
        )
        dD = None if D is None else (dy * u).sum((0, 2))
        return (
            du,
            ddt,
            dA,
            from_time_major(dBk, B_shape),
            from_time_major(dCk, C_shape),
            dD,
            dh0.view(u.shape[0], u.shape[1], A.shape[1]) if has_h0 else None,
        )


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
    initial_state: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Same contract as ``reference.selective_scan``."""
    return fused_selective_scan(
        _ScanCore, u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state, initial_state
    )
