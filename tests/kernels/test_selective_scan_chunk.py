"""selective_scan, backend "chunk" (chunked Triton) vs the float64 reference.

Triton runs in its interpreter here (no GPU), so chunks are cut to 8 steps (``CHUNK`` patched)
to cross several chunk boundaries with short sequences. Each case checks the output, the last
state and every gradient (u, delta, A, B, C, D, z, delta_bias, initial state).
"""

from __future__ import annotations

import pytest
import torch

from dogma_evolve.kernels import selective_scan
from dogma_evolve.kernels.selective_scan import chunk
from tests.kernels.kernel_checks import assert_all_close, device_for, fast_backends, leaf, outputs_and_grads
from tests.kernels.test_selective_scan import ORDER, call, make_inputs

pytestmark = pytest.mark.skipif(
    "chunk" not in fast_backends(cpu_path=False, chunked=True), reason="Triton needs CUDA or the interpreter"
)


@pytest.fixture
def short_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunk, "CHUNK", 8)


def _check(inputs: dict[str, torch.Tensor], rtol: float = 1e-9, atol: float = 1e-10) -> None:
    device = device_for("chunk")
    want, want_grads = outputs_and_grads(call("torch", inputs), [leaf(inputs[k]) for k in ORDER])
    got, got_grads = outputs_and_grads(call("chunk", inputs), [leaf(inputs[k], device) for k in ORDER])
    assert_all_close(got, want, "chunk outputs", rtol=rtol, atol=atol)
    assert_all_close(got_grads, want_grads, "chunk grads", rtol=rtol * 10, atol=atol * 10)


@pytest.mark.usefixtures("short_chunks")
@pytest.mark.parametrize(
    "layout,dim,length,decay",
    [
        ("const", 4, 1, "mixed"),  # a single step
        ("shared", 4, 5, "weak"),  # shorter than a chunk
        ("groups", 8, 16, "strong"),  # whole chunks; 4 channels per program
        ("groups", 6, 19, "mixed"),  # odd length, 3 channels per group
        ("shared", 4, 21, "strong"),
        ("const", 4, 17, "weak"),
    ],
)
def test_matches_reference_float64(layout, dim, length, decay) -> None:
    _check(make_inputs(2, dim, 5, length, layout, decay=decay))


def test_empty_sequence_passes_the_state_through() -> None:
    _check(make_inputs(2, 4, 3, 0, "shared"))


@pytest.mark.slow
def test_default_chunk_length_matches_reference() -> None:
    """Two chunks of the default 64 steps, the second partial."""
    _check(make_inputs(1, 2, 4, 70, "shared"))


@pytest.mark.usefixtures("short_chunks")
def test_optional_arguments_absent() -> None:
    """No D, z, bias, softplus, initial state; only the output used (no last-state cotangent)."""
    device = device_for("chunk")
    inputs = make_inputs(1, 4, 3, 13, "groups")
    names = ("u", "delta", "A", "B", "C")

    def run(backend, leaves):
        y = selective_scan(*leaves, backend=backend)
        cotangent = torch.cos(torch.arange(y.numel(), dtype=y.dtype)).view_as(y)
        return [y], torch.autograd.grad(y, leaves, cotangent)

    want, want_grads = run("torch", [leaf(inputs[k]) for k in names])
    got, got_grads = run("chunk", [leaf(inputs[k], device) for k in names])
    assert_all_close(got, want, "y", rtol=1e-9, atol=1e-10)
    assert_all_close(got_grads, want_grads, "du, ddelta, dA, dB, dC", rtol=1e-8, atol=1e-9)


@pytest.mark.usefixtures("short_chunks")
def test_float32_and_half_io() -> None:
    device = device_for("chunk")
    inputs = make_inputs(2, 4, 3, 11, "shared", dtype=torch.float32)
    want, want_grads = outputs_and_grads(call("torch", inputs), [leaf(inputs[k]) for k in ORDER])
    got, got_grads = outputs_and_grads(call("chunk", inputs), [leaf(inputs[k], device) for k in ORDER])
    assert_all_close(got, want, "float32 outputs", rtol=1e-4, atol=1e-5)
    assert_all_close(got_grads, want_grads, "float32 grads", rtol=1e-4, atol=1e-4)
    half = {k: v.to(device) for k, v in inputs.items()}
    half["u"] = half["u"].to(torch.bfloat16)
    y, last = call("chunk", half)(*[half[k] for k in ORDER])
    assert y.dtype == torch.bfloat16 and last.dtype == torch.float32


@pytest.mark.usefixtures("short_chunks")
def test_split_and_resume_equals_full_run() -> None:
    device = device_for("chunk")
    length, cut = 20, 7
    inputs = {k: v.to(device) for k, v in make_inputs(2, 4, 3, length, "groups").items()}
    full_y, full_last = call("chunk", inputs)(*[inputs[k] for k in ORDER])
    first, second = dict(inputs), dict(inputs)
    for key in ("u", "delta", "z", "B", "C"):
        first[key], second[key] = inputs[key][..., :cut], inputs[key][..., cut:]
    y1, last1 = call("chunk", first)(*[first[k] for k in ORDER])
    second["initial_state"] = last1
    y2, last2 = call("chunk", second)(*[second[k] for k in ORDER])
    torch.testing.assert_close(torch.cat([y1, y2], -1), full_y, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(last2, full_last, rtol=1e-10, atol=1e-10)


def test_chunk_length() -> None:
    assert [chunk.chunk_length(n) for n in (1, 5, 64, 65, 4096)] == [1, 8, 64, 64, 64]
