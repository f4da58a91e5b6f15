"""Speed of every kernel backend against the PyTorch reference, measured in one process.

For each op and each backend present on this device (Triton, fused recurrent "triton" and
chunked "chunk", needs CUDA; the C++ path exists for selective_scan only; wkv has no chunked
kernel), at L = 128 and L = 2048: forward and forward+backward wall time and
the ratio to the reference. Each backend is first checked against the reference (outputs and
gradients, float32 tolerances); a backend whose check fails gets no speed-up printed.

    python benchmarks/kernels.py [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dogma_evolve.kernels import gated_linear_recurrence, selective_scan, wkv  # noqa: E402
from dogma_evolve.kernels._dispatch import triton_available  # noqa: E402
from dogma_evolve.kernels.selective_scan import cpu as selective_scan_cpu  # noqa: E402

Inputs = list[torch.Tensor]


@dataclass(frozen=True)
class Case:
    """One op at one size: ``make(L)`` builds leaf inputs, ``run(backend, inputs)`` outputs."""

    name: str
    shape: str  # printed, with L substituted
    make: Callable[[int, torch.device], Inputs]
    run: Callable[[str, Inputs], Sequence[torch.Tensor]]
    backends: list[str]


def _leaves(*tensors: torch.Tensor) -> Inputs:
    return [t.requires_grad_(True) for t in tensors]


def _scan_inputs(length: int, device: torch.device) -> Inputs:
    batch, dim, state = 4, 256, 16
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    t = [
        r(batch, dim, length),
        r(batch, dim, length) * 0.5,
        -torch.rand(dim, state, generator=g),
        r(batch, state, length),
        r(batch, state, length),
        r(dim),
        r(batch, dim, length),
        r(dim),
    ]
    return _leaves(*(x.to(device) for x in t))


def _scan_run(backend: str, x: Inputs) -> Sequence[torch.Tensor]:
    u, delta, A, B, C, D, z, bias = x
    return [selective_scan(u, delta, A, B, C, D, z, bias, delta_softplus=True, backend=backend)]


def _wkv_inputs(length: int, device: torch.device) -> Inputs:
    batch, channels = 4, 256
    g = torch.Generator().manual_seed(0)
    t = [
        torch.rand(channels, generator=g),
        torch.randn(channels, generator=g),
        torch.randn(batch, length, channels, generator=g),
        torch.randn(batch, length, channels, generator=g),
    ]
    return _leaves(*(x.to(device) for x in t))


def _wkv_run(backend: str, x: Inputs) -> Sequence[torch.Tensor]:
    return [wkv(*x, backend=backend)]


def _glr_inputs(per_channel: bool) -> Callable[[int, torch.device], Inputs]:
    def make(length: int, device: torch.device) -> Inputs:
        batch, heads, dk, dv = 2, 4, 64, 64
        g = torch.Generator().manual_seed(0)
        decay_shape = (batch, heads, length, dk) if per_channel else (batch, heads, length)
        t = [
            torch.randn(batch, heads, length, dk, generator=g) / dk**0.5,
            torch.randn(batch, heads, length, dk, generator=g),
            torch.randn(batch, heads, length, dv, generator=g),
            -0.1 * torch.rand(*decay_shape, generator=g),
        ]
        return _leaves(*(x.to(device) for x in t))

    return make


def _glr_run(backend: str, x: Inputs) -> Sequence[torch.Tensor]:
    return gated_linear_recurrence(*x, backend=backend)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _forward_backward(case: Case, backend: str, x: Inputs) -> tuple[list, list]:
    outs = list(case.run(backend, x))
    gen = torch.Generator().manual_seed(1)
    cots = [torch.randn(o.shape, generator=gen).to(o.device, o.dtype) for o in outs]
    grads = torch.autograd.grad(outs, x, cots, allow_unused=True)
    return outs, [g if g is not None else torch.zeros_like(v) for g, v in zip(grads, x, strict=True)]


def check(case: Case, backend: str, device: torch.device) -> str | None:
    """None when backend matches the reference at L=100 in float32; else what differs."""
    x = case.make(100, device)
    want, want_g = _forward_backward(case, "torch", x)
    got, got_g = _forward_backward(case, backend, x)
    for what, a, b in (("output", got, want), ("gradient", got_g, want_g)):
        for i, (p, q) in enumerate(zip(a, b, strict=True)):
            if not torch.allclose(p.float(), q.float(), rtol=1e-3, atol=1e-3):
                return f"{what} {i} differs by {(p.float() - q.float()).abs().max().item():.3g}"
    return None


def timed(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Best of ``reps`` runs after one warm-up, in milliseconds."""
    fn()
    _sync(device)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="timed runs per measurement")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gpu_triton = device.type == "cuda" and triton_available()
    fast = ["triton"] if gpu_triton else []
    chunked = ["triton", "chunk"] if gpu_triton else []
    scan_fast = chunked + (["cpu"] if device.type == "cpu" and selective_scan_cpu.available() else [])
    glr_shape = "B 2, H 4, T {L}, dk 64, dv 64"
    cases = [
        Case(
            "selective_scan",
            "batch 4, dim 256, N 16, L {L}, B/C shared, D, z, softplus",
            _scan_inputs,
            _scan_run,
            scan_fast,
        ),
        Case("wkv", "B 4, T {L}, C 256", _wkv_inputs, _wkv_run, fast),
        Case("gla (per-channel decay)", glr_shape, _glr_inputs(True), _glr_run, chunked),
        Case("ssd (scalar decay)", glr_shape, _glr_inputs(False), _glr_run, chunked),
    ]
    name = (
        torch.cuda.get_device_name() if device.type == "cuda" else (f"CPU, {torch.get_num_threads()} threads")
    )
    triton_version = "absent"
    if triton_available():
        import triton

        triton_version = triton.__version__
    print(
        f"device: {name}; torch {torch.__version__}; triton {triton_version}; "
        f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '')!r}; best of {args.reps}"
    )
    print("reference = backend 'torch' (selective_scan, wkv: per-step loop; gla/ssd: chunked)\n")
    header = f"{'op':24} {'L':>5} {'backend':8} {'fwd ms':>9} {'fwd+bwd ms':>11} {'fwd x':>7} {'f+b x':>7}"
    print(header)
    print("-" * len(header))
    for case in cases:
        failures = {b: check(case, b, device) for b in case.backends}
        for length in (128, 2048):
            x = case.make(length, device)
            base = None
            for backend in ["torch", *case.backends]:
                fwd = timed(lambda c=case, b=backend, x=x: c.run(b, x), device, args.reps)
                both = timed(lambda c=case, b=backend, x=x: _forward_backward(c, b, x), device, args.reps)
                if backend == "torch":
                    base = (fwd, both)
                    ratio = ""
                elif failures[backend]:
                    ratio = f"  CHECK FAILED ({failures[backend]}): no speed-up reported"
                else:
                    ratio = f" {base[0] / fwd:6.1f}x {base[1] / both:6.1f}x"
                print(f"{case.name:24} {length:5d} {backend:8} {fwd:9.1f} {both:11.1f}{ratio}")
        print(f"{'':24} shape: {case.shape}")
    print("\nx = reference time / backend time (higher is faster); checks at L=100, float32.")


if __name__ == "__main__":
    main()
