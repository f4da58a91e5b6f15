"""Backend selection of the standalone package: the PyTorch reference, always.

`evolve export` writes this file as `dogma_model/kernels/_dispatch.py` in place of
`kernels/_dispatch.py`. The package carries each kernel's reference implementation only
(plain PyTorch ops: trainable, traceable, any device); the Triton and C++ fast paths stay
behind, so nothing here imports triton or builds an extension.
"""

from __future__ import annotations

import torch

BACKENDS = ("auto", "torch", "triton", "cpu")


def triton_available() -> bool:
    """Always False: the standalone package has no Triton path."""
    return False


def resolve_backend(backend: str, device: torch.device, cpu_path: bool) -> str:
    """The reference ("torch") for "auto" and "torch"; the fast paths stayed behind."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend in ("triton", "cpu"):
        raise RuntimeError(
            f"backend={backend!r}: this exported package carries the PyTorch reference kernels only"
        )
    return "torch"
