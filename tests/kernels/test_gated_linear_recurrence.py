"""gated_linear_recurrence: chunked reference and Triton vs a sequential float64 recurrence."""

from __future__ import annotations

import pytest
import torch

from dogma_evolve.kernels import gated_linear_recurrence
from dogma_evolve.kernels.gated_linear_recurrence import cpu as scalar_cpu
from tests.kernels.kernel_checks import (
    assert_all_close,
    device_for,
    fast_backends,
    leaf,
    outputs_and_grads,
    slow_when_interpreted,
    spy_on_extension,
)

BACKENDS = fast_backends(cpu_path=False)


def sequential(q, k, v, g, h0):
    """S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t, one step at a time."""
    q, k, v, g, S = (t.double() for t in (q, k, v, g, h0))
    per_channel = g.dim() == 4
    outs = []
    for t in range(q.shape[2]):
        decay = g[:, :, t].exp() if per_channel else g[:, :, t, None].exp().expand_as(q[:, :, t])
        S = decay[..., None] * S + k[:, :, t, :, None] * v[:, :, t, None, :]
        outs.append(torch.einsum("bhi,bhij->bhj", q[:, :, t], S))
    return torch.stack(outs, 2), S


def make_inputs(batch, heads, length, dk, dv, *, per_channel, decay="mixed", seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
    g_shape = (batch, heads, length, dk) if per_channel else (batch, heads, length)
    scale = {"strong": 30.0, "weak": 1e-4, "mixed": 1.0}[decay]
    g = -scale * torch.rand(*g_shape, generator=gen, dtype=dtype)
    return (
        rand(batch, heads, length, dk),
        rand(batch, heads, length, dk),
        rand(batch, heads, length, dv),
        g,
        rand(batch, heads, dk, dv),
    )


def _fn(backend, chunk_size=64):
    return lambda q, k, v, g, h0: gated_linear_recurrence(
        q, k, v, g, h0, chunk_size=chunk_size, backend=backend
    )


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("length,chunk_size", [(1, 64), (37, 16), (63, 64), (100, 32)])
@pytest.mark.parametrize("decay", ["mixed", "strong", "weak"])
def test_chunked_reference_matches_sequential(per_channel, length, chunk_size, decay) -> None:
    inputs = make_inputs(2, 2, length, 5, 3, per_channel=per_channel, decay=decay)
    want, want_grads = outputs_and_grads(sequential, [leaf(t) for t in inputs])
    got, got_grads = outputs_and_grads(_fn("torch", chunk_size), [leaf(t) for t in inputs])
    assert_all_close(got, want, "o and state", rtol=1e-9, atol=1e-10)
    assert_all_close(got_grads, want_grads, "grads", rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize(
    "backend,per_channel,length,dv,decay",
    [
        pytest.param(backend, *case, marks=slow_when_interpreted(backend, case[1]))
        for backend in BACKENDS
        for case in [
            (True, 37, 3, "mixed"),
            (False, 1, 5, "mixed"),
            (True, 20, 70, "strong"),
            (False, 63, 3, "weak"),
        ]
    ],
)
def test_backend_matches_sequential(backend, per_channel, length, dv, decay) -> None:
    device = device_for(backend)
    inputs = make_inputs(1, 2, length, 5, dv, per_channel=per_channel, decay=decay)
    want, want_grads = outputs_and_grads(sequential, [leaf(t) for t in inputs])
    got, got_grads = outputs_and_grads(_fn(backend), [leaf(t, device) for t in inputs])
    assert_all_close(got, want, "o and state", rtol=1e-9, atol=1e-10)
    assert_all_close(got_grads, want_grads, "grads", rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("backend", ["torch", *BACKENDS])
def test_float32_matches_float64(backend) -> None:
    device = device_for(backend)
    inputs = make_inputs(1, 2, 30, 4, 4, per_channel=True, dtype=torch.float32)
    want, _ = sequential(*inputs)
    o, _ = _fn(backend, 8)(*[t.to(device) for t in inputs])
    assert o.dtype == torch.float32
    torch.testing.assert_close(o.cpu().double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["torch", *BACKENDS])
@pytest.mark.parametrize("per_channel", [False, True])
def test_split_and_resume_equals_full_run(backend, per_channel) -> None:
    device = device_for(backend)
    q, k, v, g, h0 = (t.to(device) for t in make_inputs(2, 2, 29, 4, 3, per_channel=per_channel))
    o_full, s_full = gated_linear_recurrence(q, k, v, g, h0, chunk_size=8, backend=backend)
    cut = 13
    o1, s1 = gated_linear_recurrence(
        q[:, :, :cut], k[:, :, :cut], v[:, :, :cut], g[:, :, :cut], h0, chunk_size=8, backend=backend
    )
    o2, s2 = gated_linear_recurrence(
        q[:, :, cut:], k[:, :, cut:], v[:, :, cut:], g[:, :, cut:], s1, chunk_size=8, backend=backend
    )
    torch.testing.assert_close(torch.cat([o1, o2], 2), o_full, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s2, s_full, rtol=1e-10, atol=1e-10)


def test_shapes_are_checked() -> None:
    q = torch.zeros(1, 2, 5, 3)
    with pytest.raises(ValueError, match="log_decay"):
        gated_linear_recurrence(q, q, q, torch.zeros(1, 2, 5, 4))


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("length", [1, 37, 64])
@pytest.mark.parametrize("decay", ["mixed", "strong", "weak"])
def test_one_element_state_loop_matches_sequential(per_channel, length, decay) -> None:
    """dk = dv = 1 (RG-LRU, the DNA cascade, the epigenetic marks): the CPU step loop and its
    hand-written backward against the float64 recurrence, initial state and final state
    included; `auto` on CPU takes that path (same bits as `cpu`)."""
    inputs = make_inputs(3, 4, length, 1, 1, per_channel=per_channel, decay=decay)
    want, want_grads = outputs_and_grads(sequential, [leaf(t) for t in inputs])
    got, got_grads = outputs_and_grads(_fn("cpu"), [leaf(t) for t in inputs])
    assert_all_close(got, want, "o and state", rtol=1e-10, atol=1e-12)
    assert_all_close(got_grads, want_grads, "grads", rtol=1e-9, atol=1e-11)
    auto, _ = outputs_and_grads(_fn("auto"), [leaf(t) for t in inputs])
    assert all(torch.equal(a, b) for a, b in zip(auto, got, strict=True))


def test_one_element_state_loop_in_float32_resumes_and_handles_no_steps() -> None:
    q, k, v, g, h0 = make_inputs(2, 3, 40, 1, 1, per_channel=False, dtype=torch.float32)
    want, _ = sequential(q, k, v, g, h0)
    o, s = gated_linear_recurrence(q, k, v, g, h0, backend="cpu")
    assert o.dtype == torch.float32 and s.shape == (2, 3, 1, 1)
    torch.testing.assert_close(o.double(), want, rtol=1e-5, atol=1e-5)
    o1, s1 = gated_linear_recurrence(
        q[:, :, :17], k[:, :, :17], v[:, :, :17], g[:, :, :17], h0, backend="cpu"
    )
    o2, s2 = gated_linear_recurrence(
        q[:, :, 17:], k[:, :, 17:], v[:, :, 17:], g[:, :, 17:], s1, backend="cpu"
    )
    torch.testing.assert_close(torch.cat([o1, o2], 2), o)
    torch.testing.assert_close(s2, s)
    empty, kept = gated_linear_recurrence(
        q[:, :, :0], k[:, :, :0], v[:, :, :0], g[:, :, :0], h0, backend="cpu"
    )
    assert empty.shape == (2, 3, 0, 1) and torch.equal(kept, h0)


# The C++ kernel (scalar_scan.cpp) behind backend "cpu" for one-element states, and the step
# loop it falls back to.

needs_cpp = pytest.mark.skipif(not scalar_cpu.available(), reason="the C++ scalar scan did not build here")


def _loop_only(monkeypatch):
    monkeypatch.setattr(scalar_cpu, "_extension", lambda: None)


def _block_layout(batch, heads, length, *, dtype=torch.float64, seed=0):
    """Inputs as the blocks pass them: q = k = ones, v and g transposed views of (B, T, H)."""
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(batch, length, heads, generator=gen, dtype=dtype).transpose(1, 2)[..., None]
    g = -torch.rand(batch, length, heads, generator=gen, dtype=dtype).transpose(1, 2)
    ones = torch.ones(batch, heads, length, 1, dtype=dtype)
    h0 = torch.randn(batch, heads, 1, 1, generator=gen, dtype=dtype)
    return ones, ones, v, g, h0


@needs_cpp
@pytest.mark.parametrize("per_channel", [False, True])
def test_compiled_scalar_scan_passes_gradcheck(per_channel) -> None:
    inputs = make_inputs(2, 3, 7, 1, 1, per_channel=per_channel)
    assert torch.autograd.gradcheck(_fn("cpu"), [leaf(t) for t in inputs])
    no_state = [leaf(t) for t in inputs[:4]]
    assert torch.autograd.gradcheck(lambda q, k, v, g: _fn("cpu")(q, k, v, g, None), no_state)


@needs_cpp
@pytest.mark.parametrize("length", [1, 64, 100])
@pytest.mark.parametrize("decay", ["mixed", "strong", "weak"])
def test_compiled_scalar_scan_matches_sequential_float64(length, decay) -> None:
    """19 heads (a vector body and a remainder): o, the final state and every gradient, the
    initial state's included, at a tight tolerance; also in the blocks' layout, where q and k
    are constant ones (the kernel skips their gradients)."""
    inputs = make_inputs(3, 19, length, 1, 1, per_channel=False, decay=decay)
    want, want_grads = outputs_and_grads(sequential, [leaf(t) for t in inputs])
    got, got_grads = outputs_and_grads(_fn("cpu"), [leaf(t) for t in inputs])
    assert_all_close(got, want, "o and state", rtol=1e-12, atol=1e-13)
    assert_all_close(got_grads, want_grads, "grads", rtol=1e-11, atol=1e-12)
    blocks = _block_layout(2, 19, length)  # constant q = k: no gradient asked for them
    want, want_grads = outputs_and_grads(sequential, [*blocks[:2], *(leaf(t) for t in blocks[2:])])
    got, got_grads = outputs_and_grads(_fn("cpu"), [*blocks[:2], *(leaf(t) for t in blocks[2:])])
    assert_all_close(got, want, "o and state (block layout)", rtol=1e-12, atol=1e-13)
    assert_all_close(got_grads, want_grads, "grads (block layout)", rtol=1e-11, atol=1e-12)


@needs_cpp
def test_compiled_scalar_scan_matches_the_loop_in_float32(monkeypatch) -> None:
    inputs = make_inputs(16, 48, 64, 1, 1, per_channel=True, dtype=torch.float32)
    got, got_grads = outputs_and_grads(_fn("cpu"), [leaf(t) for t in inputs])
    _loop_only(monkeypatch)
    want, want_grads = outputs_and_grads(_fn("cpu"), [leaf(t) for t in inputs])
    assert all(t.dtype == torch.float32 for t in got)
    assert_all_close(got, want, "o and state", rtol=1e-5, atol=1e-5)
    assert_all_close(got_grads, want_grads, "grads", rtol=1e-5, atol=1e-5)


@needs_cpp
def test_auto_on_cpu_runs_the_compiled_scalar_scan(monkeypatch) -> None:
    calls = spy_on_extension(monkeypatch, scalar_cpu)
    o, _ = _fn("auto")(*[leaf(t) for t in _block_layout(2, 5, 9)])
    o.sum().backward()
    assert calls == ["forward", "backward"]


def test_without_the_cpp_kernel_cpu_runs_the_loop(monkeypatch) -> None:
    _loop_only(monkeypatch)
    inputs = make_inputs(2, 3, 37, 1, 1, per_channel=False)
    want, want_grads = outputs_and_grads(sequential, [leaf(t) for t in inputs])
    got, got_grads = outputs_and_grads(_fn("auto"), [leaf(t) for t in inputs])
    assert_all_close(got, want, "o and state", rtol=1e-10, atol=1e-12)
    assert_all_close(got_grads, want_grads, "grads", rtol=1e-9, atol=1e-11)
