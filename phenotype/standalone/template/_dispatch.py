"""Backend selection of the standalone package: the PyTorch reference, always.

`evolve export` writes this file as `dogma_model/kernels/_dispatch.py` in place of
`kernels/_dispatch.py`. The package carries each kernel's reference implementation only
(plain PyTorch ops: trainable, traceable, any device); the Triton and C++ fast paths stay
behind, so nothing here imports triton or builds an extension.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import torch

_P = ParamSpec("_P")
_R = TypeVar("_R")

BACKENDS = ("auto", "torch", "triton", "chunk", "cpu")


def triton_available() -> bool:
    """Always False: the standalone package has no Triton path."""
    return False


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    """True when autograd will record an op on these tensors (as in DOGMA's dispatcher)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def resolve_backend(
    backend: str,
    device: torch.device,
    cpu_path: bool,
    chunked_path: bool = False,
    length: int = 0,
    grad: bool = False,
) -> str:
    """The reference ("torch") for "auto" and "torch"; the fast paths stayed behind."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend in ("triton", "chunk", "cpu"):
        raise RuntimeError(
            f"backend={backend!r}: this exported package carries the PyTorch reference kernels only"
        )
    return "torch"


def full_precision(op: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``op`` with autocast disabled, as in DOGMA's own kernels: under bfloat16 autocast
    the reference still computes (and accumulates its state) in float32."""

    @functools.wraps(op)
    def in_full_precision(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        tensor = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        device_type = tensor.device.type if tensor is not None else "cpu"
        if not _autocast_enabled(device_type):
            return op(*args, **kwargs)
        with torch.autocast(device_type, enabled=False):
            return op(*args, **kwargs)

    return in_full_precision


def _autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type``; False for a type autocast does not know
    (``meta``: memory estimates build models there)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except RuntimeError:
        return False
