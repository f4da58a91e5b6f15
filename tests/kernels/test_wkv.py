"""wkv: reference vs the closed form, the C++ kernel, the CPU loop and Triton vs the reference,
large keys stay finite."""

from __future__ import annotations

import pytest
import torch

from dogma_evolve.kernels import WKVState, wkv, wkv_with_state
from dogma_evolve.kernels.wkv import cpu as wkv_cpu
from tests.kernels.kernel_checks import (
    assert_all_close,
    device_for,
    fast_backends,
    leaf,
    outputs_and_grads,
    slow_when_interpreted,
    spy_on_extension,
)

BACKENDS = ["cpu", *fast_backends(cpu_path=False)]  # cpu: wkv.cpp, or the loop where it cannot build


def make_inputs(batch, length, channels, *, key_scale=1.0, decay="mixed", dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = {"strong": 8.0, "weak": 1e-4, "mixed": 1.0}[decay] * torch.rand(
        channels, generator=gen, dtype=dtype
    ).add(0.1)
    u = torch.randn(channels, generator=gen, dtype=dtype)
    k = key_scale * torch.randn(batch, length, channels, generator=gen, dtype=dtype)
    v = torch.randn(batch, length, channels, generator=gen, dtype=dtype)
    return w, u, k, v


def closed_form(w, u, k, v):
    """The defining sum in float64, normalised by the largest exponent per output."""
    w, u, k, v = (t.double() for t in (w, u, k, v))
    length = k.shape[1]
    t_idx = torch.arange(length, dtype=torch.float64)
    lag = t_idx[:, None] - 1 - t_idx[None, :]  # (t, i): t - 1 - i
    past = -lag[None, :, :, None] * w + k[:, None, :, :]  # (B, t, i, C)
    past = past.masked_fill((lag < 0)[None, :, :, None], float("-inf"))
    exponents = torch.cat([past, (u + k)[:, :, None, :]], dim=2)  # (B, t, i | self, C)
    values = torch.cat([v[:, None].expand(-1, length, -1, -1), v[:, :, None]], dim=2)
    weights = torch.softmax(exponents, dim=2)
    return (weights * values).sum(2)


@pytest.mark.parametrize("length", [1, 37, 63])
@pytest.mark.parametrize("key_scale", [1.0, 40.0])
def test_reference_matches_closed_form(length, key_scale) -> None:
    w, u, k, v = make_inputs(2, length, 5, key_scale=key_scale)
    torch.testing.assert_close(wkv(w, u, k, v, backend="torch"), closed_form(w, u, k, v))


def _with_state(backend):
    def fn(w, u, k, v, num, den, top):
        y, state = wkv_with_state(w, u, k, v, WKVState(num, den, top), backend=backend)
        return y, *state

    return fn


def _run_state(backend, inputs, state, device):
    leaves = [leaf(t, device) for t in (*inputs, *state)]
    y, num, den, top = _with_state(backend)(*leaves)
    gen = torch.Generator().manual_seed(7)
    gy, gnum, gden = (torch.randn(t.shape, generator=gen, dtype=t.dtype).to(device) for t in (y, num, den))
    gmax = (gnum * num + gden * den).detach()  # the state's redundant coordinate: see wkv docs
    grads = torch.autograd.grad((y, num, den, top), leaves, (gy, gnum, gden, gmax), allow_unused=True)
    grads = [g if g is not None else torch.zeros_like(x) for g, x in zip(grads, leaves, strict=True)]
    return [y, num, den, top], grads


@pytest.mark.parametrize(
    "backend,length,key_scale,decay",
    [
        pytest.param(backend, *case, marks=slow_when_interpreted(backend, case[0]))
        for backend in BACKENDS
        for case in [(1, 1.0, "mixed"), (37, 1.0, "strong"), (20, 50.0, "weak"), (63, 1.0, "mixed")]
    ],
)
def test_backend_matches_reference_float64(backend, length, key_scale, decay) -> None:
    device = device_for(backend)
    inputs = make_inputs(2, length, 5, key_scale=key_scale, decay=decay)
    want, want_grads = outputs_and_grads(lambda *a: [wkv(*a, backend="torch")], [leaf(t) for t in inputs])
    got, got_grads = outputs_and_grads(
        lambda *a: [wkv(*a, backend=backend)], [leaf(t, device) for t in inputs]
    )
    assert_all_close(got, want, "y", rtol=1e-9, atol=1e-10)
    assert_all_close(got_grads, want_grads, "grads", rtol=1e-8, atol=1e-9)

    gen = torch.Generator().manual_seed(3)
    state = (
        torch.randn(2, 5, generator=gen, dtype=torch.float64),
        torch.rand(2, 5, generator=gen, dtype=torch.float64) + 0.5,
        3 * torch.randn(2, 5, generator=gen, dtype=torch.float64),
    )
    want, want_grads = _run_state("torch", inputs, state, "cpu")
    got, got_grads = _run_state(backend, inputs, state, device)
    assert_all_close(got, want, "y and state", rtol=1e-9, atol=1e-10)
    assert_all_close(got_grads, want_grads, "grads with state", rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("backend", ["torch", *BACKENDS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_keys_stay_finite(backend, dtype) -> None:
    device = device_for(backend)
    w, u, k, v = make_inputs(1, 24, 3, dtype=dtype)
    k = k.sign() * 100.0  # e^100 overflows float32 unless the running max is used
    leaves = [leaf(t, device) for t in (w, u, k, v)]
    y = wkv(*leaves, backend=backend)
    grads = torch.autograd.grad(y, leaves, torch.ones_like(y), allow_unused=True)
    assert torch.isfinite(y).all()
    assert all(g is None or torch.isfinite(g).all() for g in grads)
    torch.testing.assert_close(y.cpu().double(), closed_form(w, u, k, v), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", *BACKENDS])
def test_split_and_resume_equals_full_run(backend) -> None:
    device = device_for(backend)
    inputs = [leaf(t, device) for t in make_inputs(2, 30, 4)]
    w, u, k, v = inputs
    full = wkv(w, u, k, v, backend=backend)
    y1, state = wkv_with_state(w, u, k[:, :11], v[:, :11], backend=backend)
    y2, _ = wkv_with_state(w, u, k[:, 11:], v[:, 11:], state, backend=backend)
    split = torch.cat([y1, y2], 1)
    torch.testing.assert_close(split, full, rtol=1e-10, atol=1e-10)
    cot = torch.randn_like(full)
    g_full = torch.autograd.grad(full, inputs, cot)
    g_split = torch.autograd.grad(split, inputs, cot)
    assert_all_close(g_split, g_full, "resumed grads", rtol=1e-9, atol=1e-10)


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="w and u"):
        wkv(torch.zeros(3), torch.zeros(4), torch.zeros(1, 2, 4), torch.zeros(1, 2, 4))


# The C++ kernel (wkv.cpp) behind backend "cpu", and the step loop it falls back to.

needs_cpp = pytest.mark.skipif(not wkv_cpu.available(), reason="the C++ WKV kernel did not build here")


def _true_state(backend):
    """y and the state as true sums (num e^max, den e^max): what the state's gradient is
    defined through, so that gradcheck's numerical Jacobian and the kernel's agree."""

    def fn(w, u, k, v, num, den, top):
        y, (n, d, m) = wkv_with_state(w, u, k, v, WKVState(num, den, top), backend=backend)
        return y, n * m.exp(), d * m.exp()

    return fn


@needs_cpp
@pytest.mark.parametrize("with_state", [False, True])
def test_compiled_kernel_passes_gradcheck(with_state) -> None:
    w, u, k, v = make_inputs(2, 9, 3, key_scale=3.0)
    state = (
        torch.randn(2, 3, dtype=torch.float64),
        torch.rand(2, 3, dtype=torch.float64) + 0.5,
        torch.randn(2, 3, dtype=torch.float64),
    )
    leaves = [leaf(t) for t in (w, u, k, v, *state)]
    if with_state:
        assert torch.autograd.gradcheck(_true_state("cpu"), leaves)
    else:
        assert torch.autograd.gradcheck(lambda *a: wkv(*a, backend="cpu"), leaves[:4])


@needs_cpp
@pytest.mark.parametrize(
    "length,key_scale,decay", [(1, 1.0, "mixed"), (64, 1.0, "strong"), (40, 50.0, "weak"), (64, 3.0, "mixed")]
)
def test_compiled_kernel_matches_reference_float64(length, key_scale, decay) -> None:
    """Every output and gradient (w, u, k, v and the incoming state), 19 channels: a vector
    body and a remainder."""
    inputs = make_inputs(3, length, 19, key_scale=key_scale, decay=decay)
    gen = torch.Generator().manual_seed(5)
    state = (
        torch.randn(3, 19, generator=gen, dtype=torch.float64),
        torch.rand(3, 19, generator=gen, dtype=torch.float64) + 0.5,
        3 * torch.randn(3, 19, generator=gen, dtype=torch.float64),
    )
    want, want_grads = _run_state("torch", inputs, state, "cpu")
    got, got_grads = _run_state("cpu", inputs, state, "cpu")
    assert_all_close(got, want, "y and state", rtol=1e-10, atol=1e-12)
    assert_all_close(got_grads, want_grads, "grads with state", rtol=1e-9, atol=1e-11)


def _loop_only(monkeypatch):
    monkeypatch.setattr(wkv_cpu, "_extension", lambda: None)


def _float32_run(backend, inputs, cotangents):
    """Outputs and gradients (incoming state included) for float64-drawn cotangents."""
    leaves = [leaf(t) for t in inputs]
    y, (num, den, top) = wkv_with_state(*leaves[:4], WKVState(*leaves[4:]), backend=backend)
    gy, gnum, gden = (c.to(y.dtype) for c in cotangents)
    grads = torch.autograd.grad(
        (y, num, den, top), leaves, (gy, gnum, gden, (gnum * num + gden * den).detach())
    )
    return [t.detach() for t in (y, num, den, *grads)]


@needs_cpp
@pytest.mark.parametrize("key_scale", [1.0, 30.0])
def test_compiled_kernel_matches_the_loop_in_float32(monkeypatch, key_scale) -> None:
    """float32 at a model's shape (48 channels): the C++ kernel and the step loop agree to
    float32 rounding, relative to each quantity's scale, and are as close as each other to the
    float64 reference."""
    gen = torch.Generator().manual_seed(2)
    inputs = [
        *make_inputs(4, 64, 48, key_scale=key_scale, dtype=torch.float32),
        torch.randn(4, 48, generator=gen),
        torch.rand(4, 48, generator=gen) + 0.5,
        torch.randn(4, 48, generator=gen),
    ]
    cotangents = [
        torch.randn(*shape, generator=gen, dtype=torch.float64) for shape in ((4, 64, 48), (4, 48), (4, 48))
    ]
    want = _float32_run("torch", [t.double() for t in inputs], cotangents)
    got = _float32_run("cpu", inputs, cotangents)
    _loop_only(monkeypatch)
    loop = _float32_run("cpu", inputs, cotangents)
    for i, (g, lp, w) in enumerate(zip(got, loop, want, strict=True)):
        assert g.dtype == torch.float32
        scale = float(w.abs().max())
        assert float((g - lp).abs().max()) <= 1e-5 * scale, i
        assert (
            float((g.double() - w).abs().max()) <= 2 * float((lp.double() - w).abs().max()) + 1e-6 * scale
        ), i


@needs_cpp
def test_auto_on_cpu_runs_the_compiled_kernel(monkeypatch) -> None:
    calls = spy_on_extension(monkeypatch, wkv_cpu)
    leaves = [leaf(t) for t in make_inputs(2, 5, 3)]
    wkv(*leaves).sum().backward()
    assert calls == ["forward", "backward"]


def test_without_the_cpp_kernel_cpu_runs_the_loop(monkeypatch) -> None:
    _loop_only(monkeypatch)
    inputs = make_inputs(2, 21, 5, key_scale=5.0)
    want, want_grads = outputs_and_grads(lambda *a: [wkv(*a, backend="torch")], [leaf(t) for t in inputs])
    got, got_grads = outputs_and_grads(lambda *a: [wkv(*a, backend="auto")], [leaf(t) for t in inputs])
    assert torch.equal(got[0], want[0])  # the loop's forward is the reference's
    assert_all_close(got_grads, want_grads, "grads", rtol=1e-9, atol=1e-10)
