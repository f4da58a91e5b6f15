"""selective_scan: reference vs an independent loop, every backend vs the reference."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dogma_evolve.kernels import selective_scan
from dogma_evolve.kernels.selective_scan import reference
from tests.kernels.kernel_checks import (
    assert_all_close,
    device_for,
    fast_backends,
    leaf,
    outputs_and_grads,
    slow_when_interpreted,
)

BACKENDS = fast_backends(cpu_path=True)


def make_inputs(
    batch: int,
    dim: int,
    state: int,
    length: int,
    layout: str,
    *,
    decay: str = "mixed",
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Random inputs; layout is 'const', 'shared' (batch, N, L) or 'groups' (batch, 2, N, L)."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype)

    operand_shape = {
        "const": (dim, state),
        "shared": (batch, state, length),
        "groups": (batch, 2, state, length),
    }[layout]
    # strong: exp(dt * A) ~ e^-20 per step; weak: ~ 1 - 1e-4
    magnitude = {"strong": 40.0, "weak": 1e-4, "mixed": 2.0}[decay]
    A = -magnitude * (0.5 + torch.rand(dim, state, generator=gen, dtype=dtype))
    return dict(
        u=rand(batch, dim, length),
        delta=rand(batch, dim, length) * 0.5,
        A=A,
        B=rand(*operand_shape),
        C=rand(*operand_shape),
        D=rand(dim),
        z=rand(batch, dim, length),
        delta_bias=rand(dim) * 0.5,
        initial_state=rand(batch, dim, state),
    )


def independent_loop(u, delta, A, B, C, D, z, delta_bias, initial_state):
    """Float64 loop over time, channel by group index, written apart from the reference."""
    u, delta, A, D, z = (t.double() for t in (u, delta, A, D, z))
    batch, dim, length = u.shape
    dt = F.softplus(delta + delta_bias.double()[:, None])
    h = initial_state.double().clone()
    ys = torch.zeros(batch, dim, length, dtype=torch.float64)

    def at(M: torch.Tensor, t: int) -> torch.Tensor:  # (batch or 1, dim, N) operand at step t
        if M.dim() == 2:
            return M.double()[None]
        M = M if M.dim() == 4 else M[:, None]
        group = torch.arange(dim) // (dim // M.shape[1])
        return M.double()[:, group, :, t]

    for t in range(length):
        h = torch.exp(dt[:, :, t, None] * A) * h + (dt[:, :, t] * u[:, :, t])[..., None] * at(B, t)
        ys[:, :, t] = (h * at(C, t)).sum(-1) + D * u[:, :, t]
    return ys * z * torch.sigmoid(z), h


def call(backend: str, inputs: dict[str, torch.Tensor], **extra):
    def fn(u, delta, A, B, C, D, z, delta_bias, initial_state):
        return selective_scan(
            u,
            delta,
            A,
            B,
            C,
            D=D,
            z=z,
            delta_bias=delta_bias,
            delta_softplus=True,
            return_last_state=True,
            backend=backend,
            initial_state=initial_state,
            **extra,
        )

    return fn


ORDER = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")


@pytest.mark.parametrize("layout", ["const", "shared", "groups"])
@pytest.mark.parametrize("length", [1, 37])
def test_reference_matches_independent_loop(layout: str, length: int) -> None:
    inputs = make_inputs(2, 6, 5, length, layout)
    args = [inputs[k] for k in ORDER]
    y, last = reference.selective_scan(
        *args[:5],
        D=args[5],
        z=args[6],
        delta_bias=args[7],
        delta_softplus=True,
        return_last_state=True,
        initial_state=args[8],
    )
    y_want, last_want = independent_loop(*args)
    torch.testing.assert_close(y, y_want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(last, last_want, rtol=1e-10, atol=1e-10)


def _cases(backend: str) -> list[tuple[str, int, str]]:
    if backend == "triton":  # interpreter: tiny shapes, few cases
        return [
            ("groups", 37, "mixed"),
            ("const", 1, "mixed"),
            ("shared", 63, "strong"),
            ("shared", 5, "weak"),
        ]
    return [
        (layout, length, "mixed") for layout in ("const", "shared", "groups") for length in (1, 37, 63, 100)
    ] + [("groups", 100, "strong"), ("groups", 100, "weak")]


@pytest.mark.parametrize(
    "backend,layout,length,decay",
    [pytest.param(b, *case, marks=slow_when_interpreted(b, case[1])) for b in BACKENDS for case in _cases(b)],
)
def test_backend_matches_reference_float64(backend, layout, length, decay) -> None:
    device = device_for(backend)
    dim = 6 if backend == "triton" else 10  # 10 channels: odd per-group count (5) on CPU
    inputs = make_inputs(2, dim, 5, length, layout, decay=decay)
    ref_leaves = [leaf(inputs[k]) for k in ORDER]
    got_leaves = [leaf(inputs[k], device) for k in ORDER]
    want, want_grads = outputs_and_grads(call("torch", inputs), ref_leaves)
    got, got_grads = outputs_and_grads(call(backend, inputs), got_leaves)
    assert_all_close(got, want, f"{backend} outputs", rtol=1e-9, atol=1e-10)
    assert_all_close(got_grads, want_grads, f"{backend} grads", rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_float32_and_half_io(backend: str) -> None:
    device = device_for(backend)
    inputs = make_inputs(2, 4, 3, 9, "shared", dtype=torch.float32)
    want, want_grads = outputs_and_grads(call("torch", inputs), [leaf(inputs[k]) for k in ORDER])
    got, got_grads = outputs_and_grads(call(backend, inputs), [leaf(inputs[k], device) for k in ORDER])
    assert_all_close(got, want, "float32 outputs", rtol=1e-4, atol=1e-5)
    assert_all_close(got_grads, want_grads, "float32 grads", rtol=1e-4, atol=1e-4)
    half = {k: v.to(device) for k, v in inputs.items()}
    half["u"] = half["u"].to(torch.bfloat16)
    y, last = call(backend, half)(*[half[k] for k in ORDER])
    assert y.dtype == torch.bfloat16 and last.dtype == torch.float32


@pytest.mark.parametrize("backend", ["torch", *BACKENDS])
def test_split_and_resume_equals_full_run(backend: str) -> None:
    device = device_for(backend)
    length, cut = 40 if backend != "triton" else 12, 7
    inputs = {k: v.to(device) for k, v in make_inputs(2, 4, 3, length, "groups").items()}
    full_y, full_last = call(backend, inputs)(*[inputs[k] for k in ORDER])
    first, second = dict(inputs), dict(inputs)
    for key in ("u", "delta", "z", "B", "C"):
        first[key], second[key] = inputs[key][..., :cut], inputs[key][..., cut:]
    y1, last1 = call(backend, first)(*[first[k] for k in ORDER])
    second["initial_state"] = last1
    y2, last2 = call(backend, second)(*[second[k] for k in ORDER])
    torch.testing.assert_close(torch.cat([y1, y2], -1), full_y, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(last2, full_last, rtol=1e-10, atol=1e-10)


def test_auto_on_cpu_uses_a_path_equal_to_reference() -> None:
    inputs = make_inputs(1, 3, 2, 17, "shared")
    args = [inputs[k] for k in ORDER]
    got = call("auto", inputs)(*args)
    want = call("torch", inputs)(*args)
    assert_all_close(got, want, "auto", rtol=1e-10, atol=1e-10)


def test_optional_arguments_default_like_mamba() -> None:
    inputs = make_inputs(1, 3, 2, 8, "shared")
    u, delta, A, B, C = (inputs[k] for k in ORDER[:5])
    for backend in ["torch", *BACKENDS]:
        y = selective_scan(u, delta, A, B, C, backend=backend)
        h = torch.zeros(1, 3, 2, dtype=torch.float64)
        for t in range(8):  # no bias, no softplus, no D, no gate, zero initial state
            h = torch.exp(delta[:, :, t, None] * A) * h + (delta * u)[:, :, t, None] * B[:, None, :, t]
            torch.testing.assert_close(y[:, :, t], (h * C[:, None, :, t]).sum(-1))


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(A=torch.zeros(5, 2)), "A must be"),
        (dict(B=torch.zeros(1, 4, 2, 8)), "B must be"),
        (dict(D=torch.zeros(2)), "D must be"),
        (dict(initial_state=torch.zeros(1, 3, 3)), "initial"),
    ],
)
def test_bad_shapes_are_rejected(change, message) -> None:
    args = dict(
        u=torch.zeros(1, 3, 8),
        delta=torch.zeros(1, 3, 8),
        A=torch.zeros(3, 2),
        B=torch.zeros(1, 2, 8),
        C=torch.zeros(1, 2, 8),
    )
    args.update(change)
    with pytest.raises(ValueError, match=message):
        selective_scan(**args, backend="torch")


def test_unwritten_outputs_would_be_nan() -> None:
    """The autouse fixture is live: a kernel that skips a store leaves NaN behind."""
    assert math.isnan(torch.empty(3)[0].item())
    assert torch.isnan(torch.empty_like(torch.zeros(2))).all()


def test_failed_build_warns_and_auto_falls_back(monkeypatch, tmp_path) -> None:
    from dogma_evolve.kernels import _build
    from dogma_evolve.kernels.selective_scan import cpu

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "extensions"))
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    with pytest.warns(RuntimeWarning, match="falling back to the PyTorch reference"):
        assert _build.load_cpu_extension("broken_for_test", broken) is None

    monkeypatch.setattr(cpu, "_extension", lambda: None)
    inputs = make_inputs(1, 3, 2, 5, "shared")
    args = [inputs[k] for k in ORDER]
    assert_all_close(call("auto", inputs)(*args), call("torch", inputs)(*args), "fallback", rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="could not be built"):
        call("cpu", inputs)(*args)
