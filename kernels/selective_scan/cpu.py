"""Fused C++ selective scan for CPU tensors (``selective_scan.cpp``), forward and backward.

Parallel over (batch, channel) with ``at::parallel_for``. The backward pass recomputes states
chunk by chunk from the checkpoints saved by the forward pass (one state per ``CHUNK`` steps), so
memory stays O(batch * dim * N * L / CHUNK) beyond the inputs. Step-size preprocessing
(bias, softplus) and the silu gate are ATen ops around the fused core, differentiated by autograd.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from .._build import load_cpu_extension
from .shapes import from_time_major, fused_selective_scan, time_major

CHUNK = 64  # steps between saved states: backward recomputes at most this many per chunk


def _extension() -> ModuleType | None:
    return load_cpu_extension("selective_scan", Path(__file__).with_name("selective_scan.cpp"))


def _built() -> ModuleType:
    """The extension, for the autograd function: ``selective_scan`` requires ``available()``."""
    extension = _extension()
    if extension is None:
        raise RuntimeError("the C++ selective scan is not built: check available() first")
    return extension


def available() -> bool:
    """True when the C++ kernel is built (building it now if needed)."""
    return _extension() is not None


def _summed(partials: torch.Tensor, variable: bool) -> torch.Tensor:
    """The kernel's dB/dC partial sums, reduced to the time-major operand: a variable operand
    comes per channel split (batch, splits, G, L, N), a constant one per batch row."""
    return partials.sum(1) if variable else partials.sum(0)


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
        Bk, Ck = time_major(B), time_major(C)
        y, last, ckpt = _built().forward(u, dt, A, Bk, Ck, D, h0, CHUNK)
        ctx.save_for_backward(u, dt, A, Bk, Ck, D, ckpt)
        ctx.operands = (B.shape, C.shape)
        ctx.has_h0 = h0 is not None
        return y, last

    @staticmethod
    def backward(
        ctx: Any, dy: torch.Tensor | None, dlast: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        u, dt, A, Bk, Ck, D, ckpt = ctx.saved_tensors
        dy = torch.zeros_like(u) if dy is None else dy.contiguous()
        batch, dim, _ = u.shape
        splits = min(dim, max(1, math.ceil(torch.get_num_threads() / batch)))
        du, ddt, dA, dB, dC, dh0 = _built().backward(
            u,
            dt,
            A,
            Bk,
            Ck,
            D,
            ckpt,
            dy,
            None if dlast is None else dlast.contiguous(),
            CHUNK,
            splits,
        )
        B_shape, C_shape = ctx.operands
        dD = None if D is None else (dy * u).sum((0, 2))
        return (
            du,
            ddt,
            dA.sum(0),
            from_time_major(_summed(dB, len(B_shape) > 2), B_shape),
            from_time_major(_summed(dC, len(C_shape) > 2), C_shape),
            dD,
            dh0 if ctx.has_h0 else None,
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
    """Same contract as ``reference.selective_scan``; requires ``available()``."""
    return fused_selective_scan(
        _ScanCore, u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state, initial_state
    )
