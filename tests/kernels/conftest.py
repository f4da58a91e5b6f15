"""Kernel-test settings: Triton in interpreter mode without a GPU, NaN-filled fresh tensors."""

from __future__ import annotations

import os
import shutil

# Read by triton at import time: must precede every import of triton (the root conftest sets it
# too; this keeps `pytest tests/kernels` from another root directory safe).
if not (shutil.which("nvidia-smi") or os.environ.get("CUDA_VISIBLE_DEVICES")):
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.utils._device  # noqa: E402  (imported by torch._dynamo, which the kernels no longer import)


def _nan_fill(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point():
        with torch.no_grad():
            t.fill_(float("nan"))
    return t


@pytest.fixture(autouse=True)
def nan_filled_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.empty / torch.empty_like return NaN: an output a kernel forgets to write fails."""
    # torch's device context lists its factory functions once per process (an lru_cache);
    # listed inside this patch, the real torch.empty would ignore `with torch.device(...)`.
    torch.utils._device._device_constructors()
    empty, empty_like = torch.empty, torch.empty_like
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: _nan_fill(empty(*a, **kw)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **kw: _nan_fill(empty_like(*a, **kw)))
