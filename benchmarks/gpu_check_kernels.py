"""The kernel half of ``benchmarks/gpu_check.py``: every op and backend against a float64
reference, and their speed against the PyTorch reference (plus mamba-ssm and fla, where
they import).

Correctness. Each backend runs on float32 inputs and on bfloat16 inputs; the reference runs
in float64 on the same values (the bfloat16 ones widened), so the only errors measured are
the backend's own. Error = max |x - ref| / max |ref| over the output and over every input's
gradient (of ``sum(out * w)`` for a fixed random ``w``). Tolerances:

* float32 inputs: output 1e-4, gradients 1e-3. The kernels compute in float32
  (unit roundoff 6e-8); a scan of L = 4096 steps adds up to L roundings along a path,
  and a gradient such as dA sums B·L terms, so 1e-4 / 1e-3 leave room for that while a wrong
  recurrence (a missed decay, an off-by-one step) is off by O(1).
* bfloat16 inputs: output and gradients 2e-2. The kernels upcast to float32 inside, so the
  error is the final rounding of the output (and of each gradient) to bfloat16, whose 8-bit
  significand is off by at most 2^-9 ≈ 0.2 % relative, plus float32 accumulation: 2e-2 is
  ten such roundings of the largest value.

Timing: ``torch.cuda.Event`` around each call (``time.perf_counter`` on CPU), after warm-up
calls (Triton compiles on the first), median of the repeats; forward alone under
``no_grad``, then forward + backward.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from dogma_evolve.kernels import gated_linear_recurrence, selective_scan, wkv
from dogma_evolve.kernels._dispatch import BACKENDS

Inputs = list[torch.Tensor]
TOLERANCES = {torch.float32: (1e-4, 1e-3), torch.bfloat16: (2e-2, 2e-2)}  # (output, gradients)


@dataclass(frozen=True)
class Shapes:
    """Training shapes: the selective scan's (batch, dim, state, length); the gated
    recurrence's heads and head width with dim = heads * head_dim; wkv's channels = dim."""

    batch: int
    dim: int
    state: int
    length: int
    heads: int

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


FULL = Shapes(batch=8, dim=2048, state=16, length=4096, heads=16)
TINY = Shapes(batch=2, dim=16, state=4, length=64, heads=2)
# `--dry-run`'s rows and probes on CPU: TINY at a quarter of its length, a third of the Triton
# interpreter's time there (one chunk either way); on CUDA the probes keep TINY
DRY = Shapes(batch=2, dim=16, state=4, length=16, heads=2)


@dataclass(frozen=True)
class Op:
    """``make(shapes, generator)``: float32 leaf tensors on CPU; ``run(inputs, backend)``:
    the output (batch first); ``shape(shapes)``: printed; ``shared``: the inputs without a
    batch dimension (parameters every batch row uses)."""

    name: str
    make: Callable[[Shapes, torch.Generator], Inputs]
    run: Callable[[Inputs, str], torch.Tensor]
    shape: Callable[[Shapes], str]
    shared: tuple[int, ...] = ()


def _scan_inputs(s: Shapes, g: torch.Generator) -> Inputs:
    b, d, n, length = s.batch, s.dim, s.state, s.length
    return [
        torch.randn(b, d, length, generator=g),  # u
        torch.randn(b, d, length, generator=g) * 0.5 - 1.0,  # delta: softplus ~ 0.3
        -torch.arange(1, n + 1, dtype=torch.float32).repeat(d, 1),  # A: Mamba's S4D-real init
        torch.randn(b, n, length, generator=g),  # B
        torch.randn(b, n, length, generator=g),  # C
        torch.randn(d, generator=g),  # D
        torch.randn(b, d, length, generator=g),  # z
        torch.randn(d, generator=g) * 0.1,  # delta_bias
    ]


def _scan(x: Inputs, backend: str) -> torch.Tensor:
    u, delta, A, B, C, D, z, bias = x
    out = selective_scan(u, delta, A, B, C, D, z, bias, delta_softplus=True, backend=backend)
    assert isinstance(out, torch.Tensor)
    return out


def _glr_inputs(s: Shapes, g: torch.Generator) -> Inputs:
    b, h, t, k = s.batch, s.heads, s.length, s.head_dim
    scale = k**-0.5
    return [
        torch.randn(b, h, t, k, generator=g) * scale,  # q
        torch.randn(b, h, t, k, generator=g) * scale,  # k
        torch.randn(b, h, t, k, generator=g),  # v
        F.logsigmoid(torch.randn(b, h, t, generator=g) + 4.0),  # per-head log decay ~ -0.02
    ]


def _glr(x: Inputs, backend: str) -> torch.Tensor:
    return gated_linear_recurrence(*x, backend=backend)[0]


def _wkv_inputs(s: Shapes, g: torch.Generator) -> Inputs:
    b, t, c = s.batch, s.length, s.dim
    return [
        torch.rand(c, generator=g) * 0.5 + 0.01,  # w >= 0
        torch.randn(c, generator=g) * 0.5,  # u
        torch.randn(b, t, c, generator=g),  # k
        torch.randn(b, t, c, generator=g),  # v
    ]


def _wkv(x: Inputs, backend: str) -> torch.Tensor:
    return wkv(*x, backend=backend)


OPS = (
    Op(
        "selective_scan",
        _scan_inputs,
        _scan,
        lambda s: f"B{s.batch} D{s.dim} N{s.state} L{s.length}",
        shared=(2, 5, 7),  # A, D, delta_bias
    ),
    Op(
        "gated_linear_recurrence",
        _glr_inputs,
        _glr,
        lambda s: f"B{s.batch} H{s.heads} T{s.length} dk=dv={s.head_dim}",
    ),
    Op("wkv", _wkv_inputs, _wkv, lambda s: f"B{s.batch} T{s.length} C{s.dim}", shared=(0, 1)),
)


def on(inputs: Inputs, device: torch.device, dtype: torch.dtype) -> Inputs:
    """Leaf copies of ``inputs`` on ``device`` in ``dtype``, requiring gradients."""
    return [t.to(device=device, dtype=dtype).detach().requires_grad_() for t in inputs]


def backends_of(op: Op, device: torch.device, shapes: Shapes = TINY) -> list[str]:
    """The fast backends ``op`` offers on ``device`` (``kernels._dispatch.BACKENDS`` less
    ``auto`` and the reference), found by trying each on a tiny input (``shapes``): a backend the op
    lacks (``chunk`` where there is no chunked kernel: a ``ValueError``) or, on CPU, the
    machine lacks (Triton without its interpreter) is left out; on CUDA any other failure
    keeps the backend, so that its row fails instead of vanishing."""
    found = []
    tiny = on(op.make(shapes, torch.Generator().manual_seed(1)), device, torch.float32)
    for backend in BACKENDS:
        if backend in ("auto", "torch") or (backend == "cpu" and device.type != "cpu"):
            continue
        try:
            op.run(tiny, backend).sum().backward()
        except ValueError:  # resolve_backend: the op has no such kernel
            continue
        except Exception:  # noqa: BLE001
            if device.type == "cuda":  # offered on CUDA but broken: its row reports the failure
                found.append(backend)
            continue  # on CPU: Triton without its interpreter, a C++ build that failed
        if backend == "cpu" and op.name != "selective_scan":
            continue  # the reference under another name: no compiled CPU path
        found.append(backend)
    return found


@dataclass
class Reference:
    """The float64 reference's output and input gradients of ``sum(out * weight)``."""

    out: torch.Tensor
    grads: tuple[torch.Tensor | None, ...]
    weight: torch.Tensor


def reference(op: Op, inputs: Inputs, rows: int = 1) -> Reference:
    """``op``'s PyTorch reference in float64 on the values of ``inputs``, ``rows`` batch rows
    at a time (batch rows are independent: outputs and batched inputs' gradients are
    concatenated, shared parameters' gradients summed), which bounds the float64 autograd
    graph of the per-step references (the selective scan's whole batch at L = 4096 would
    hold about 100 GB)."""
    batch = next(t for i, t in enumerate(inputs) if i not in op.shared).shape[0]
    outs: list[torch.Tensor] = []
    parts: list[list[torch.Tensor | None]] = []
    weight: torch.Tensor | None = None
    for start in range(0, batch, rows):
        wide = [
            t.detach().double().requires_grad_()
            if i in op.shared
            else t.detach()[start : start + rows].double().requires_grad_()
            for i, t in enumerate(inputs)
        ]
        out = op.run(wide, "torch")
        if weight is None:
            shape = (batch, *out.shape[1:])
            weight = torch.randn(shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
            weight = weight.to(out.device)
        grads = torch.autograd.grad((out * weight[start : start + rows]).sum(), wide, allow_unused=True)
        outs.append(out.detach())
        parts.append([None if g is None else g.detach() for g in grads])
    assert weight is not None
    total: list[torch.Tensor | None] = []
    for i, pieces in enumerate(zip(*parts, strict=True)):
        if any(p is None for p in pieces):
            total.append(None)
        elif i in op.shared:
            total.append(torch.stack([p for p in pieces if p is not None]).sum(0))
        else:
            total.append(torch.cat([p for p in pieces if p is not None]))
    return Reference(torch.cat(outs), tuple(total), weight)


def errors(op: Op, inputs: Inputs, backend: str, ref: Reference) -> tuple[float, float]:
    """(output error, worst gradient error) of ``backend``, each max |x - ref| / max |ref|."""
    out = op.run(inputs, backend)
    grads = torch.autograd.grad((out.double() * ref.weight).sum(), inputs, allow_unused=True)
    pairs = [(g, r) for g, r in zip(grads, ref.grads, strict=True) if g is not None and r is not None]
    return _relative(out, ref.out), max((_relative(g, r) for g, r in pairs), default=0.0)


def _relative(x: torch.Tensor, ref: torch.Tensor) -> float:
    scale = float(ref.abs().max())
    return float((x.detach().double() - ref).abs().max()) / (scale if scale > 0 else 1.0)


def median_ms(fn: Callable[[], Any], device: torch.device, warmup: int, repeats: int) -> float:
    """Median wall time of ``fn()`` in milliseconds after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
        else:
            tick = time.perf_counter()
            fn()
            times.append(1000 * (time.perf_counter() - tick))
    return statistics.median(times)


def timings(
    op: Op, inputs: Inputs, backend: str, device: torch.device, warmup: int, repeats: int
) -> tuple[float, float]:
    """(forward ms, forward + backward ms) of ``op`` under ``backend``."""

    def forward() -> None:
        with torch.no_grad():
            op.run(inputs, backend)

    grad = None

    def forward_backward() -> None:
        nonlocal grad
        for t in inputs:
            t.grad = None
        out = op.run(inputs, backend)
        grad = torch.ones_like(out) if grad is None else grad
        out.backward(grad)

    return (
        median_ms(forward, device, warmup, repeats),
        median_ms(forward_backward, device, warmup, repeats),
    )


def external_selective_scan() -> Callable[[Inputs, str], torch.Tensor] | str:
    """mamba-ssm's CUDA selective scan with our argument order, or why not."""
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn  # type: ignore
    except Exception as error:  # noqa: BLE001 - any failure to import means "not there"
        return "not installed" if isinstance(error, ImportError) else f"import failed: {error}"

    def run(x: Inputs, _backend: str) -> torch.Tensor:
        u, delta, A, B, C, D, z, bias = x
        return selective_scan_fn(u, delta, A, B, C, D, z, bias, delta_softplus=True)

    return run


def external_chunk_gla() -> Callable[[Inputs, str], torch.Tensor] | str:
    """fla's chunked simple-GLA kernel (per-head decay, no 1/sqrt(dk) scale) in our (B, H, T,
    d) layout, or why not."""
    try:
        from fla.ops.simple_gla import chunk_simple_gla  # type: ignore
    except Exception as error:  # noqa: BLE001
        return "not installed" if isinstance(error, ImportError) else f"import failed: {error}"

    def run(x: Inputs, _backend: str) -> torch.Tensor:
        q, k, v, g = (t.transpose(1, 2) for t in x)  # fla: (B, T, H, d), g (B, T, H)
        out = chunk_simple_gla(q.contiguous(), k.contiguous(), v.contiguous(), g.contiguous(), scale=1.0)
        out = out[0] if isinstance(out, tuple) else out
        return out.transpose(1, 2)

    return run


__all__ = [
    "DRY",
    "FULL",
    "OPS",
    "TINY",
    "TOLERANCES",
    "Op",
    "Shapes",
    "backends_of",
    "Reference",
    "errors",
    "external_chunk_gla",
    "external_selective_scan",
    "median_ms",
    "on",
    "reference",
    "timings",
]
