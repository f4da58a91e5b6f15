"""selective_scan's C++ CPU kernel at the state sizes it compiles as constants (8, 16, 32:
unrolled vector loops, and for float32 an inline exp) and at one it does not."""

from __future__ import annotations

import pytest
import torch

from dogma_evolve.kernels.selective_scan import cpu
from tests.kernels.kernel_checks import assert_all_close, leaf, outputs_and_grads
from tests.kernels.test_selective_scan import ORDER, call, make_inputs

pytestmark = pytest.mark.skipif(not cpu.available(), reason="the C++ CPU kernel did not build")


@pytest.mark.parametrize("state", [8, 16, 32, 12])
@pytest.mark.parametrize("layout,decay", [("shared", "mixed"), ("groups", "strong"), ("const", "weak")])
def test_fixed_state_sizes_match_reference_float64(state: int, layout: str, decay: str) -> None:
    # 70 steps: two checkpoint chunks of the backward pass (CHUNK = 64), the second partial
    inputs = make_inputs(2, 6, state, 70, layout, decay=decay)
    want, want_grads = outputs_and_grads(call("torch", inputs), [leaf(inputs[k]) for k in ORDER])
    got, got_grads = outputs_and_grads(call("cpu", inputs), [leaf(inputs[k]) for k in ORDER])
    assert_all_close(got, want, "outputs", rtol=1e-10, atol=1e-12)
    assert_all_close(got_grads, want_grads, "grads (initial state included)", rtol=1e-10, atol=1e-11)


def _run(
    inputs: dict[str, torch.Tensor], backend: str, cotangents: list[torch.Tensor]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Outputs and gradients (every input's) for the given output cotangents."""
    leaves = [leaf(inputs[k]) for k in ORDER]
    outs = call(backend, inputs)(*leaves)
    grads = torch.autograd.grad(outs, leaves, [c.to(o.dtype) for c, o in zip(cotangents, outs, strict=True)])
    return list(outs), list(grads)


@pytest.mark.parametrize("state", [8, 16, 32, 12])
@pytest.mark.parametrize("decay", ["mixed", "strong"])
def test_float32_matches_float64_reference(state: int, decay: str) -> None:
    """float32 (the inline exp, clamped below e^-87.3) within float32 rounding of float64."""
    inputs = make_inputs(2, 6, state, 70, "shared", decay=decay)
    gen = torch.Generator().manual_seed(1234)
    cotangents = [torch.randn(2, 6, 70, generator=gen), torch.randn(2, 6, state, generator=gen)]
    want, want_grads = _run(inputs, "torch", cotangents)
    got, got_grads = _run({k: v.float() for k, v in inputs.items()}, "cpu", cotangents)
    assert all(g.dtype == torch.float32 for g in (*got, *got_grads))
    assert_all_close(got, want, "float32 outputs", rtol=1e-4, atol=1e-5)
    assert_all_close(got_grads, want_grads, "float32 grads", rtol=1e-4, atol=1e-4)
