"""Backend selection shared by every kernel.

``backend="auto"`` picks Triton for CUDA tensors and the best CPU path otherwise; ``"triton"``
(the fused recurrent Triton kernel, sequential over time), ``"chunk"`` (the chunked Triton
kernel, parallel over time within chunks, where the op has one), ``"torch"`` (the reference)
and ``"cpu"`` (a compiled C++ loop, where the op has one) force a path.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

import torch

_P = ParamSpec("_P")
_R = TypeVar("_R")

BACKENDS = ("auto", "torch", "triton", "chunk", "cpu")

# `auto` on CUDA takes the chunked kernel for sequences at least this long when gradients are
# needed (training), the fused recurrent one otherwise (decoding, short prompts). Not yet
# measured on a GPU: `make gpu-check` times both paths.
CHUNKED_MIN_LENGTH = 64

_REFERENCE_ONLY = contextvars.ContextVar("reference_only", default=False)


@contextlib.contextmanager
def reference_only() -> Iterator[None]:
    """Inside, ``backend="auto"`` resolves to the reference (``"torch"``) for every op: what
    ``torch.export`` sees, and what `evolve export`'s check compares an exported model's fast
    paths with."""
    token = _REFERENCE_ONLY.set(True)
    try:
        yield
    finally:
        _REFERENCE_ONLY.reset(token)


def plain_ops_only() -> bool:
    """True inside :func:`reference_only`, ``torch.export`` and ``torch.compile``: where an
    opaque fast path (a compiled kernel, an autograd Function with its backward written out,
    an op with ``out=``) must give way to plain PyTorch ops. The blocks' own fast paths
    (`phenotype.blocks`: the DNA lane scan, TetraMemory's neighbour attention) ask it too."""
    return _REFERENCE_ONLY.get() or torch.compiler.is_exporting() or torch.compiler.is_compiling()


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    """True when autograd will record an op on these tensors."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def triton_available() -> bool:
    """True when the ``triton`` package can be imported on this machine."""
    return importlib.util.find_spec("triton") is not None


def resolve_backend(
    backend: str,
    device: torch.device,
    cpu_path: bool,
    chunked_path: bool = False,
    length: int = 0,
    grad: bool = False,
) -> str:
    """Turn ``backend`` into a concrete path for tensors on ``device``.

    ``cpu_path`` says whether the op has a compiled CPU implementation worth choosing on CPU,
    ``chunked_path`` whether it has a chunked Triton kernel; ``length`` (steps) and ``grad``
    (gradients needed) choose between the two Triton kernels under ``auto`` on CUDA.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "chunk" and not chunked_path:
        raise ValueError("backend='chunk': this op has no chunked kernel")
    if backend in ("triton", "chunk") and device.type != "cuda" and not os.environ.get("TRITON_INTERPRET"):
        raise RuntimeError(
            f"backend={backend!r} needs CUDA tensors, or TRITON_INTERPRET=1 set before triton is "
            "imported (interpreter mode, for tests)"
        )
    if backend != "auto":
        return backend
    if plain_ops_only():
        # Opaque fast paths cannot be traced: torch.export and torch.compile get the
        # reference, which is plain PyTorch ops (evolve export relies on this).
        return "torch"
    if device.type == "cuda" and triton_available():
        return "chunk" if chunked_path and grad and length >= CHUNKED_MIN_LENGTH else "triton"
    if device.type == "cpu" and cpu_path:
        return "cpu"
    return "torch"


def opaque_to_compile(op: Callable[_P, _R]) -> Callable[_P, _R]:
    """``torch.compiler.disable(op)``, with ``torch._dynamo`` imported at the first call
    instead of at import.

    Under ``torch.compile`` the op then runs eagerly (a graph break) with its fast path,
    instead of dynamo unrolling the reference's Python loop over time. The decorator itself
    imports ``torch._dynamo`` (~1.6 s), which every process that imports the kernels paid:
    a search's driver, which decodes genomes but never trains, and every short CLI command.
    torch's own lazy form (``torch._compile._disable_dynamo``, what ``torch.optim`` uses) defers
    that to the first call, when a process that trains has long imported it (AdamW does).
    """
    from torch._compile import _disable_dynamo

    return _disable_dynamo(op)


def full_precision(op: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``op`` with autocast disabled on its tensors' device.

    Every backend already casts its inputs to the compute dtype (float32, or float64 when an
    input is float64) and returns the output in the input's dtype; with autocast disabled the
    PyTorch ops inside (the reference loops, the chunked form's matrix products, the
    autograd functions' bookkeeping) also stay in that dtype, so under bfloat16 mixed
    precision a scan's state still accumulates in float32.
    """

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
