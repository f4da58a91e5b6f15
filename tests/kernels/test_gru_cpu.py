"""The fused C++ GRU (`kernels.recurrent`, `recurrent.cpp`) against `nn.GRU`, and the GRU block's
use of it: the same outputs and gradients with the fast path on and off, the fallback where it
must give way (`plain_ops_only`, no gradients, other dtypes), the same loss curve."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import dogma_evolve.kernels.recurrent as recurrent
from dogma_evolve.kernels._dispatch import reference_only
from dogma_evolve.kernels.recurrent import cpu, gru, gru_fast_path, reference
from dogma_evolve.phenotype.blocks.recurrent import FusedRecurrence, GRUConfig
from tests.kernels.kernel_checks import assert_all_close

pytestmark = pytest.mark.skipif(not cpu.available(), reason="the C++ CPU kernel did not build")

# (B, T, D, H): T = 1, H not a multiple of 8, D != H, D > H
SHAPES = [(3, 5, 4, 6), (2, 1, 3, 5), (4, 9, 7, 13), (1, 17, 16, 8), (5, 12, 20, 11)]


def _gru_module(d: int, h: int, dtype: torch.dtype, seed: int = 0) -> nn.GRU:
    torch.manual_seed(seed)
    rnn = nn.GRU(d, h, batch_first=True).to(dtype)
    with torch.no_grad():  # biases away from PyTorch's small uniform init: every term matters
        for p in rnn.parameters():
            p.mul_(2.0)
    return rnn


def _weights(rnn: nn.GRU) -> list[torch.Tensor]:
    return list(rnn.all_weights[0])  # weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0


def _outputs_and_grads(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, weights: list[torch.Tensor], seed: int = 1
) -> list[torch.Tensor]:
    """[h, dx, dW_ih, dW_hh, db_ih, db_hh] for a random cotangent of h (same seed every call)."""
    leaves = [x, *weights]
    out = fn(x)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return [out.detach(), *torch.autograd.grad(out, leaves, cotangent)]


def _fused(rnn: nn.GRU) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: gru(x, *_weights(rnn), backend="cpu")


def _module(rnn: nn.GRU) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: rnn(x)[0]


@pytest.mark.parametrize("shape", SHAPES)
def test_float64_outputs_and_every_gradient_equal_nn_gru(shape: tuple[int, int, int, int]) -> None:
    b, t, d, h = shape
    rnn = _gru_module(d, h, torch.float64)
    x = torch.randn(b, t, d, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).requires_grad_()
    want = _outputs_and_grads(_module(rnn), x, _weights(rnn))
    got = _outputs_and_grads(_fused(rnn), x, _weights(rnn))
    assert got[0].shape == (b, t, h)
    assert_all_close(got, want, "h, dx, dW_ih, dW_hh, db_ih, db_hh", rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape", SHAPES[:3])
def test_the_reference_loop_equals_nn_gru(shape: tuple[int, int, int, int]) -> None:
    b, t, d, h = shape
    rnn = _gru_module(d, h, torch.float64)
    x = torch.randn(b, t, d, dtype=torch.float64).requires_grad_()
    want = _outputs_and_grads(_module(rnn), x, _weights(rnn))
    got = _outputs_and_grads(lambda x: reference.gru(x, *_weights(rnn)), x, _weights(rnn))
    assert_all_close(got, want, "reference", rtol=1e-10, atol=1e-10)
    via_backend = _outputs_and_grads(lambda x: gru(x, *_weights(rnn), backend="torch"), x, _weights(rnn))
    assert_all_close(via_backend, want, "backend='torch'", rtol=1e-10, atol=1e-10)


def test_gradcheck() -> None:
    rnn = _gru_module(3, 4, torch.float64)
    x = torch.randn(2, 3, 3, dtype=torch.float64).requires_grad_()
    weights = [w.detach().clone().requires_grad_() for w in _weights(rnn)]
    assert torch.autograd.gradcheck(lambda *a: gru(*a, backend="cpu"), (x, *weights))


@pytest.mark.parametrize("shape", [(16, 64, 48, 40), (3, 7, 9, 13)])
def test_float32_is_close_to_nn_gru(shape: tuple[int, int, int, int]) -> None:
    """Within 1e-5 of nn.GRU's float32 (gradients: 1e-5 of their scale; dW sums B*T rows),
    and no further from the float64 result than nn.GRU's float32 is (give or take rounding)."""
    b, t, d, h = shape
    rnn = _gru_module(d, h, torch.float32)
    x = torch.randn(b, t, d).requires_grad_()
    want = _outputs_and_grads(_module(rnn), x, _weights(rnn))
    got = _outputs_and_grads(_fused(rnn), x, _weights(rnn))
    assert all(g.dtype == torch.float32 for g in got)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5 * max(1.0, float(w.abs().max())), msg=str(i))
    rnn64 = _gru_module(d, h, torch.float64)
    x64 = x.detach().double().requires_grad_()
    truth = _outputs_and_grads(_module(rnn64), x64, _weights(rnn64))
    for g, w, exact in zip(got, want, truth, strict=True):
        ours, torchs = (g.double() - exact).abs().max(), (w.double() - exact).abs().max()
        assert ours <= 2 * torchs + 1e-6 * max(1.0, float(exact.abs().max()))


def test_weights_only_and_non_contiguous_inputs() -> None:
    """x without gradient (dx is skipped) and a transposed view of x: the weights' gradients
    still equal nn.GRU's."""
    rnn = _gru_module(6, 5, torch.float64)
    x = torch.randn(7, 4, 6, dtype=torch.float64).transpose(0, 1)  # (4, 7, 6), not contiguous
    weights = _weights(rnn)
    cotangent = torch.randn(4, 7, 5, dtype=torch.float64)
    want = torch.autograd.grad(rnn(x)[0], weights, cotangent)
    got = torch.autograd.grad(gru(x, *weights, backend="cpu"), weights, cotangent)
    assert_all_close(list(got), list(want), "weight grads", rtol=1e-10, atol=1e-10)


def test_which_path_auto_takes() -> None:
    rnn = _gru_module(4, 6, torch.float32)
    x = torch.randn(2, 3, 4)
    assert gru_fast_path(x, *_weights(rnn))
    assert gru_fast_path(x.double(), *(w.double() for w in _weights(rnn)))
    assert not gru_fast_path(x.double(), *_weights(rnn))  # mixed dtypes
    assert not gru_fast_path(x.bfloat16(), *(w.bfloat16() for w in _weights(rnn)))
    with reference_only():
        assert not gru_fast_path(x, *_weights(rnn))
    with pytest.raises(ValueError, match="backend"):
        gru(x, *_weights(rnn), backend="triton")
    with pytest.raises(ValueError, match="weight_ih"):
        gru(x[..., :3], *_weights(rnn))


# -- the block ---------------------------------------------------------------------------------
def _calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the block's calls of the C++ GRU (cpu.gru)."""
    calls: list[int] = []
    original = cpu.gru

    def counted(*args: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(cpu, "gru", counted)
    return calls


def _block(dtype: torch.dtype, d: int = 12, h: int = 10) -> FusedRecurrence:
    torch.manual_seed(0)
    return FusedRecurrence(GRUConfig(d_model=d, bias=True, hidden=h)).to(dtype)


def _block_outputs_and_grads(block: FusedRecurrence, x: torch.Tensor) -> list[torch.Tensor]:
    x = x.detach().clone().requires_grad_()
    out = block(x)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=out.dtype)
    params = list(block.parameters())
    return [out.detach(), *torch.autograd.grad(out, [x, *params], cotangent)]


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_the_block_gives_the_same_outputs_and_gradients_fast_or_not(
    dtype: torch.dtype, tol: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = _block(dtype)
    x = torch.randn(3, 9, 12, dtype=dtype)
    calls = _calls(monkeypatch)
    fast = _block_outputs_and_grads(block, x)
    assert len(calls) == 1
    with reference_only():  # plain ops only: nn.GRU, as under torch.export / torch.compile
        slow = _block_outputs_and_grads(block, x)
    assert len(calls) == 1
    monkeypatch.setattr(recurrent, "gru_fast_path", lambda *a: False)
    off = _block_outputs_and_grads(block, x)
    assert len(calls) == 1
    assert_all_close(fast, slow, "fast vs reference_only", rtol=tol, atol=tol)
    assert_all_close(off, slow, "switched off vs reference_only", rtol=0, atol=0)


def test_the_block_keeps_nn_gru_without_gradients_and_under_autocast(monkeypatch: pytest.MonkeyPatch) -> None:
    block = _block(torch.float32)
    x = torch.randn(2, 5, 12)
    calls = _calls(monkeypatch)
    with torch.no_grad():
        inference = block(x)
    assert not calls  # inference: nn.GRU
    assert torch.equal(inference, block.out_proj(block.rnn(x)[0]))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the recurrence runs in float32, autocast off
        fast = block(x.bfloat16())
    assert len(calls) == 1
    with torch.autocast("cpu", dtype=torch.bfloat16), reference_only():
        slow = block(x.bfloat16())
    assert fast.dtype == slow.dtype == torch.bfloat16  # out_proj under autocast
    torch.testing.assert_close(fast, slow, rtol=1e-2, atol=1e-2)  # bfloat16 rounding of the output
    assert list(block.state_dict()) == [
        "rnn.weight_ih_l0",
        "rnn.weight_hh_l0",
        "rnn.bias_ih_l0",
        "rnn.bias_hh_l0",
        "out_proj.weight",
        "out_proj.bias",
    ]


def test_a_few_training_steps_give_the_same_loss_curve(monkeypatch: pytest.MonkeyPatch) -> None:
    def curve() -> list[float]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Embedding(30, 16), _block(torch.float32, 16, 24), nn.Linear(16, 30))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ids = torch.randint(0, 30, (4, 21), generator=torch.Generator().manual_seed(1))
        losses = []
        for _ in range(6):
            logits = model(ids[:, :-1])
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses

    calls = _calls(monkeypatch)
    fast = curve()
    assert len(calls) == 6
    monkeypatch.setattr(recurrent, "gru_fast_path", lambda *a: False)
    slow = curve()
    assert len(calls) == 6
    assert slow[-1] < slow[0]
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)
