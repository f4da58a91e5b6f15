"""wkv: reference vs the closed form, the CPU loop and Triton vs the reference, large keys stay finite."""

from __future__ import annotations

import pytest
import torch

from dogma_evolve.kernels import WKVState, wkv, wkv_with_state
from tests.kernels.kernel_checks import (
    assert_all_close,
    device_for,
    fast_backends,
    leaf,
    outputs_and_grads,
    slow_when_interpreted,
)

BACKENDS = ["cpu", *fast_backends(cpu_path=False)]  # cpu: the loop with the hand-written backward


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
