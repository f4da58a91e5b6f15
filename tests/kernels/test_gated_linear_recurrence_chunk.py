"""gated_linear_recurrence, backend "chunk" (chunked Triton) vs a sequential float64 recurrence.

Triton runs in its interpreter here (no GPU): chunks of 16 and a few heads keep every case
small. Each case checks the output, the final state and every gradient (q, k, v, the decays,
the initial state) against the one-step-at-a-time loop, for lengths below, at and across
chunk boundaries, and for decays near 0 (weak) and very negative (strong).
"""

from __future__ import annotations

import pytest
import torch

from dogma_evolve.kernels import gated_linear_recurrence, wkv
from dogma_evolve.kernels._dispatch import CHUNKED_MIN_LENGTH, resolve_backend
from dogma_evolve.kernels.gated_linear_recurrence.chunk import chunk_length
from tests.kernels.kernel_checks import assert_all_close, device_for, fast_backends, leaf, outputs_and_grads
from tests.kernels.test_gated_linear_recurrence import make_inputs, sequential

pytestmark = pytest.mark.skipif(
    "chunk" not in fast_backends(cpu_path=False, chunked=True), reason="no Triton"
)


def _chunked(chunk_size: int = 16):
    return lambda q, k, v, g, h0: gated_linear_recurrence(
        q, k, v, g, h0, chunk_size=chunk_size, backend="chunk"
    )


def _check_against_sequential(inputs, rtol=1e-9, atol=1e-10) -> None:
    device = device_for("chunk")
    want, want_grads = outputs_and_grads(sequential, [leaf(t) for t in inputs])
    got, got_grads = outputs_and_grads(_chunked(), [leaf(t, device) for t in inputs])
    assert_all_close(got, want, "o and final state", rtol=rtol, atol=atol)
    assert_all_close(got_grads, want_grads, "dq, dk, dv, dg, dh0", rtol=rtol * 10, atol=atol * 10)


@pytest.mark.parametrize(
    "length,decay",
    [(1, "mixed"), (13, "weak"), (16, "mixed"), (37, "strong"), (37, "weak"), (50, "mixed")],
)
def test_scalar_decay_matches_sequential(length, decay) -> None:
    _check_against_sequential(make_inputs(1, 2, length, 5, 3, per_channel=False, decay=decay))


@pytest.mark.parametrize(
    "length,decay",
    [
        (1, "mixed"),
        (13, "strong"),
        (21, "weak"),
        (37, "mixed"),
        (40, "strong"),
    ],
)
def test_per_channel_decay_matches_sequential(length, decay) -> None:
    _check_against_sequential(make_inputs(1, 1, length, 5, 3, per_channel=True, decay=decay))


def test_several_value_blocks_and_wide_keys() -> None:
    """dv = 70 spans two value blocks of the state kernels; dk = 20 pads to 32."""
    _check_against_sequential(make_inputs(1, 1, 19, 20, 70, per_channel=False, decay="mixed"))


@pytest.mark.parametrize("per_channel", [False, True])
def test_no_initial_state_and_output_only(per_channel) -> None:
    """Without an initial state and with only o used (no cotangent for the final state)."""
    device = device_for("chunk")
    q, k, v, g, _ = make_inputs(2, 1, 18, 4, 3, per_channel=per_channel, decay="mixed")

    def run(backend, leaves):
        o, _ = gated_linear_recurrence(*leaves, chunk_size=16, backend=backend)
        cot = torch.linspace(-1, 1, o.numel(), dtype=o.dtype).reshape(o.shape).to(o.device)
        return [o], torch.autograd.grad(o, leaves, cot)

    want, want_grads = run("torch", [leaf(t) for t in (q, k, v, g)])
    got, got_grads = run("chunk", [leaf(t, device) for t in (q, k, v, g)])
    assert_all_close(got, want, "o", rtol=1e-9, atol=1e-10)
    assert_all_close(got_grads, want_grads, "dq, dk, dv, dg", rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("per_channel", [False, True])
def test_float32_matches_float64(per_channel) -> None:
    device = device_for("chunk")
    inputs = make_inputs(1, 1, 30, 4, 4, per_channel=per_channel)

    def float32_run(*leaves):  # float32 in and out, float64 cotangents for both runs
        o, state = _chunked()(*(t.float() for t in leaves))
        assert o.dtype == state.dtype == torch.float32
        return o.double(), state.double()

    want, want_grads = outputs_and_grads(sequential, [leaf(t) for t in inputs])
    got, got_grads = outputs_and_grads(float32_run, [leaf(t, device) for t in inputs])
    assert_all_close(got, want, "float32 o and state", rtol=1e-4, atol=1e-4)
    assert_all_close(got_grads, want_grads, "float32 grads", rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("per_channel", [False, True])
def test_empty_sequence_passes_the_state_through(per_channel) -> None:
    """T = 0: no output, the final state is the initial one, and so is its gradient."""
    device = device_for("chunk")
    q, k, v, g, h0 = (leaf(t, device) for t in make_inputs(1, 2, 0, 4, 3, per_channel=per_channel))
    o, state = gated_linear_recurrence(q, k, v, g, h0, chunk_size=16, backend="chunk")
    assert o.shape == (1, 2, 0, 3)
    torch.testing.assert_close(state, h0, rtol=0, atol=0)
    cotangent = torch.randn_like(state)
    (dh0,) = torch.autograd.grad(state, h0, cotangent)
    torch.testing.assert_close(dh0, cotangent, rtol=0, atol=0)


def test_split_and_resume_equals_full_run() -> None:
    device = device_for("chunk")
    q, k, v, g, h0 = (t.to(device) for t in make_inputs(1, 2, 29, 4, 3, per_channel=False))
    o_full, s_full = gated_linear_recurrence(q, k, v, g, h0, chunk_size=16, backend="chunk")
    cut = 11
    o1, s1 = gated_linear_recurrence(
        *(t[:, :, :cut] for t in (q, k, v, g)), h0, chunk_size=16, backend="chunk"
    )
    o2, s2 = gated_linear_recurrence(
        *(t[:, :, cut:] for t in (q, k, v, g)), s1, chunk_size=16, backend="chunk"
    )
    torch.testing.assert_close(torch.cat([o1, o2], 2), o_full, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s2, s_full, rtol=1e-10, atol=1e-10)


def test_chunk_length_is_a_power_of_two_in_range() -> None:
    assert [chunk_length(n) for n in (1, 8, 16, 17, 37, 64, 200)] == [16, 16, 16, 32, 64, 64, 64]


def test_auto_picks_chunked_for_training_lengths_on_cuda() -> None:
    """Dispatch only: resolve_backend reads the device type, so no GPU is needed."""
    cuda = torch.device("cuda")
    pick = lambda length, grad: resolve_backend(  # noqa: E731
        "auto", cuda, cpu_path=False, chunked_path=True, length=length, grad=grad
    )
    assert pick(CHUNKED_MIN_LENGTH, grad=True) == "chunk"
    assert pick(CHUNKED_MIN_LENGTH - 1, grad=True) == "triton"
    assert pick(4096, grad=False) == "triton"  # decoding / inference: fused recurrent
    assert pick(1, grad=True) == "triton"
    assert (
        resolve_backend("auto", cuda, cpu_path=False, length=4096, grad=True) == "triton"
    )  # no chunked kernel
    cpu = torch.device("cpu")
    assert resolve_backend("auto", cpu, cpu_path=False, chunked_path=True, length=4096, grad=True) == "torch"
    assert resolve_backend("auto", cpu, cpu_path=True, chunked_path=True, length=4096, grad=True) == "cpu"


def test_an_op_without_a_chunked_kernel_rejects_chunk() -> None:
    w, u = torch.rand(3), torch.zeros(3)
    x = torch.zeros(1, 4, 3)
    with pytest.raises(ValueError, match="no chunked kernel"):
        wkv(w, u, x, x, backend="chunk")
