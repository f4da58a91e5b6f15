"""Backend selection shared by every kernel.

``backend="auto"`` picks Triton for CUDA tensors and the best CPU path otherwise; ``"triton"``,
``"torch"`` (the reference) and ``"cpu"`` (a compiled C++ loop, where the op has one) force a path.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import torch

_P = ParamSpec("_P")
_R = TypeVar("_R")

BACKENDS = ("auto", "torch", "triton", "cpu")


def triton_available() -> bool:
    """True when the ``triton`` package can be imported on this machine."""
    return importlib.util.find_spec("triton") is not None


def resolve_backend(backend: str, device: torch.device, cpu_path: bool) -> str:
    """Turn ``backend`` into a concrete path for tensors on ``device``.

    ``cpu_path`` says whether the op has a compiled CPU implementation worth choosing on CPU.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "triton" and device.type != "cuda" and not os.environ.get("TRITON_INTERPRET"):
        raise RuntimeError(
            "backend='triton' needs CUDA tensors, or TRITON_INTERPRET=1 set before triton is "
            "imported (interpreter mode, for tests)"
        )
    if backend != "auto":
        return backend
    if torch.compiler.is_exporting() or torch.compiler.is_compiling():
        # Opaque fast paths cannot be traced: torch.export and torch.compile get the
        # reference, which is plain PyTorch ops (evolve export relies on this).
        return "torch"
    if device.type == "cuda" and triton_available():
        return "triton"
    if device.type == "cpu" and cpu_path:
        return "cpu"
    return "torch"


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
        if not torch.is_autocast_enabled(device_type):
            return op(*args, **kwargs)
        with torch.autocast(device_type, enabled=False):
            return op(*args, **kwargs)

    return in_full_precision
