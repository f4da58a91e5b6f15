"""Backend selection shared by every kernel.

``backend="auto"`` picks Triton for CUDA tensors and the best CPU path otherwise; ``"triton"``,
``"torch"`` (the reference) and ``"cpu"`` (a compiled C++ loop, where the op has one) force a path.
"""

from __future__ import annotations

import importlib.util
import os

import torch

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
