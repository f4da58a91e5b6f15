"""Training precision: which arithmetic a candidate trains and is scored in.

``precision`` is ``"auto" | "fp32" | "bf16"``:

* ``fp32``: every op in float32 (the CPU default; bit-reproducible with the seed and thread
  count).
* ``bf16``: mixed precision. The forward pass (and the loss) runs under
  ``torch.autocast(device, torch.bfloat16)``: matrix products take bfloat16 operands and
  accumulate in float32, elementwise work follows its inputs. The master weights, gradients
  and AdamW's moments stay float32 (no loss scaling: bfloat16 has float32's exponent range),
  the cross-entropy is taken on float32 logits, and the sequence kernels (``kernels/``) run
  with autocast disabled on float32 copies of their inputs, so a scan's state accumulates in
  float32 (``kernels._dispatch.full_precision``).
* ``auto``: ``bf16`` on CUDA, ``fp32`` elsewhere.

A result records the precision it trained in (``metrics["precision"]``, resolved, never
``auto``); a result without it trained in ``fp32`` (:data:`LEGACY_PRECISION`), as every
evaluation did before this option existed. The names live in the torch-free
``evaluation.options`` (a run's configuration checks them without loading torch).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .options import LEGACY_PRECISION, PRECISIONS

if TYPE_CHECKING:  # torch is imported where it runs: reading a store (`evolve report`) needs none
    import torch


def resolve_precision(precision: str, device_type: str) -> str:
    """``precision`` for a run on ``device_type`` (``"cuda"``, ``"cpu"`` ...): ``auto`` is
    ``bf16`` on CUDA and ``fp32`` elsewhere; ``fp32`` and ``bf16`` are themselves.

    Raises ``ValueError`` for anything outside :data:`PRECISIONS`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    if precision == "auto":
        return "bf16" if device_type == "cuda" else "fp32"
    return precision


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    """The context the forward pass runs in: nothing for ``fp32``, bfloat16 autocast on
    ``device``'s type for ``bf16`` (``precision`` already resolved)."""
    if resolve_precision(precision, device.type) == "fp32":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def pool_precision(precision: str, pool: object | None) -> str:
    """``precision`` resolved for the candidates ``pool`` trains: ``pool.device_type``
    (``EvaluationPool``: ``"cuda"`` when its cluster has GPUs) or, for a pool without one
    (in-process pools, ``None``), this process's CUDA availability, which is where such a
    pool trains."""
    device_type = getattr(pool, "device_type", None)
    if not isinstance(device_type, str):
        import torch

        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    return resolve_precision(precision, device_type)


def precision_of(metrics: Mapping[str, Any] | None) -> str:
    """The precision a stored result trained in (:data:`LEGACY_PRECISION` when unrecorded)."""
    value = (metrics or {}).get("precision")
    return value if isinstance(value, str) else LEGACY_PRECISION


__all__ = [
    "LEGACY_PRECISION",
    "PRECISIONS",
    "autocast",
    "pool_precision",
    "precision_of",
    "resolve_precision",
]
