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
* ``auto``: ``bf16`` on CUDA; on a CPU, what a short measured probe says pays on this
  machine (:func:`cpu_probe`): ``fp32`` where the CPU has no bfloat16 matrix instructions
  (AMX or AVX512-BF16: there bfloat16 products are emulated, 10-50x slower than float32),
  and where it has them, ``bf16`` only if a two-layer MLP's forward and backward at the
  search's width (1,024 tokens, ``d = 64``, ``4d`` hidden) runs at least
  :data:`BF16_MARGIN` times faster under bfloat16 autocast than in float32, ``fp32``
  otherwise. The probe runs once per process (a few milliseconds), in the process that
  resolves the run's precision (the driver: every candidate of a run trains in one
  arithmetic, so the cache rule can key on it).

A result records the precision it trained in (``metrics["precision"]``, resolved, never
``auto``); a result without it trained in ``fp32`` (:data:`LEGACY_PRECISION`), as every
evaluation did before this option existed. The names live in the torch-free
``evaluation.options`` (a run's configuration checks them without loading torch).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .options import LEGACY_PRECISION, PRECISIONS

if TYPE_CHECKING:  # torch is imported where it runs: reading a store (`evolve report`) needs none
    import torch


#: How much faster bfloat16 must run the probe than float32 for ``auto`` to choose it on a
#: CPU: below this the casts and the rounding are not worth it.
BF16_MARGIN = 1.25
PROBE_WIDTH = 64  # the search's median width (`evolution.spaces.dogma.guards.SEED_WIDTHS`)
PROBE_TOKENS = 1024  # one training batch of the default fitness: 16 sequences of 64 bytes
PROBE_REPEATS = 8


@dataclass(frozen=True)
class CpuProbe:
    """What ``auto`` resolves to on this CPU, and why: ``choice`` (``fp32`` | ``bf16``),
    ``reason`` (one line), and the probe's MLP training speed in each arithmetic (GFLOP/s;
    ``None`` where it was not timed)."""

    choice: str
    reason: str
    fp32_gflops: float | None = None
    bf16_gflops: float | None = None


def cpu_has_bf16_units() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AMX tiles or AVX512-BF16)."""
    import torch

    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def mlp_step_gflops(bf16: bool, width: int = PROBE_WIDTH, tokens: int = PROBE_TOKENS) -> float:
    """GFLOP/s of one forward and backward of ``Linear(d, 4d) -> GELU -> Linear(4d, d)`` on
    ``(tokens, d)`` float32 inputs, under bfloat16 autocast when ``bf16``: the matrix work of
    a candidate's step, casts included. FLOPs: ``3 · 2 · tokens · 8d²`` (forward, and the
    backward's two products per layer); the best of :data:`PROBE_REPEATS` timed repeats
    after one warm-up."""
    import torch

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, width, generator=gen)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
    )
    context = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    best = float("inf")
    for repeat in range(PROBE_REPEATS + 1):
        tick = time.perf_counter()
        with context:
            out = mlp(x)
        out.float().square().mean().backward()
        if repeat:
            best = min(best, time.perf_counter() - tick)
    return 3 * 2 * tokens * 8 * width * width / best / 1e9


@functools.cache
def cpu_probe() -> CpuProbe:
    """What ``auto`` is on this CPU (module docstring), measured once per process."""
    if not cpu_has_bf16_units():
        return CpuProbe("fp32", "no bfloat16 matrix instructions (AMX, AVX512-BF16) on this CPU")
    fp32, bf16 = mlp_step_gflops(bf16=False), mlp_step_gflops(bf16=True)
    choice = "bf16" if bf16 >= BF16_MARGIN * fp32 else "fp32"
    verdict = "pays" if choice == "bf16" else f"is short of the {BF16_MARGIN}x it must gain"
    reason = f"bf16 autocast at {bf16:.0f} GFLOP/s vs fp32 {fp32:.0f} on the probe MLP: {verdict}"
    return CpuProbe(choice, reason, fp32, bf16)


def resolve_precision(precision: str, device_type: str) -> str:
    """``precision`` for a run on ``device_type`` (``"cuda"``, ``"cpu"`` ...): ``auto`` is
    ``bf16`` on CUDA and :func:`cpu_probe`'s choice on a CPU (``fp32`` on any other device);
    ``fp32`` and ``bf16`` are themselves.

    Raises ``ValueError`` for anything outside :data:`PRECISIONS`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    if precision == "auto":
        if device_type == "cuda":
            return "bf16"
        return cpu_probe().choice if device_type == "cpu" else "fp32"
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
    "BF16_MARGIN",
    "LEGACY_PRECISION",
    "PRECISIONS",
    "CpuProbe",
    "autocast",
    "cpu_has_bf16_units",
    "cpu_probe",
    "mlp_step_gflops",
    "pool_precision",
    "precision_of",
    "resolve_precision",
]
