"""Shared checks for the kernel tests: backends present, and output + gradient comparison."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch

from dogma_evolve.kernels._dispatch import triton_available
from dogma_evolve.kernels.selective_scan import cpu as selective_scan_cpu


def fast_backends(cpu_path: bool, chunked: bool = False) -> list[str]:
    """Non-reference backends that can run here (Triton needs CUDA or the interpreter);
    ``"chunk"`` only when ``chunked`` (the op has a chunked Triton kernel)."""
    import os

    names = []
    if cpu_path and selective_scan_cpu.available():
        names.append("cpu")
    if triton_available() and (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET")):
        names += ["triton", "chunk"] if chunked else ["triton"]
    return names


def slow_when_interpreted(backend: str, length: int) -> list[pytest.MarkDecorator]:
    """``slow`` for a Triton case of tens of steps run by the interpreter (no GPU), which takes
    about a second: `make test` runs those cases, `make test-fast` only the short ones."""
    interpreted = backend == "triton" and not torch.cuda.is_available()
    return [pytest.mark.slow] if interpreted and length > 5 else []


def device_for(backend: str) -> torch.device:
    if backend in ("triton", "chunk") and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def outputs_and_grads(
    fn: Callable[..., Sequence[torch.Tensor]],
    inputs: Sequence[torch.Tensor],
    seed: int = 1234,
) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """Run fn(*inputs) and back-propagate random cotangents (same seed for every backend)."""
    outs = list(fn(*inputs))
    gen = torch.Generator().manual_seed(seed)
    cotangents = [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for o in outs]
    leaves = [x for x in inputs if x is not None and x.requires_grad]
    grads = torch.autograd.grad(outs, leaves, cotangents, allow_unused=True)
    return outs, [g if g is not None else torch.zeros_like(x) for g, x in zip(grads, leaves, strict=True)]


def assert_all_close(
    got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], what: str, rtol: float, atol: float
) -> None:
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = g.detach().cpu().to(w.dtype), w.detach().cpu()
        assert g.shape == w.shape, f"{what}[{i}]: shape {tuple(g.shape)} != {tuple(w.shape)}"
        assert torch.isfinite(g).all(), f"{what}[{i}] has non-finite values"
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=lambda m, i=i: f"{what}[{i}]: {m}")


def leaf(t: torch.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
    """A fresh leaf copy on device that requires grad."""
    return t.detach().to(device).clone().requires_grad_(True)


def spy_on_extension(monkeypatch: pytest.MonkeyPatch, module: object) -> list[str]:
    """Wrap ``module._extension()`` (a CPU path's compiled module) so that each call of its
    ``forward`` and ``backward`` is listed, in order, in the list returned."""
    calls: list[str] = []
    built = module._extension()  # type: ignore[attr-defined]

    class Spy:
        def forward(self, *args: object) -> object:
            calls.append("forward")
            return built.forward(*args)

        def backward(self, *args: object) -> object:
            calls.append("backward")
            return built.backward(*args)

    monkeypatch.setattr(module, "_extension", lambda: Spy())
    return calls
