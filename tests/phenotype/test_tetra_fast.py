"""The TetraMemory blocks' batched forwards compute the functions they replaced: `tetra`
(`blocks.tetra_mesh`: neighbours and pooled corners gathered by one index each, the scores'
bias and mask built once) and `tetra_reach` (`blocks.memory`), checked against frozen copies of
the earlier forwards, in float64 on perturbed weights: the output and every parameter's
gradient."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from dogma_evolve.phenotype.blocks.memory import TetraReach
from dogma_evolve.phenotype.blocks.tetra_mesh import CORNERS, TetraMesh, lattice_offset
from tests.phenotype.phenotype_helpers import block_config

RTOL = 1e-10


# -- frozen reference: TetraMesh.forward before the gathers ------------------------------------
def _delays(seq: torch.Tensor, offsets: list[int]) -> list[torch.Tensor]:
    pad = min(max(offsets), seq.shape[1])
    padded = torch.cat([seq.new_zeros(seq.shape[0], pad, seq.shape[2]), seq], 1) if pad else seq
    T = seq.shape[1]
    return [padded[:, pad - o : pad - o + T] if o < T else seq.new_zeros(seq.shape) for o in offsets]


def _corner_mean(corners: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(corners).sum(0) / len(corners)


def _ref_tetra(b: TetraMesh, x: torch.Tensor) -> torch.Tensor:
    c = b.cfg

    def pooled(h: torch.Tensor) -> list[torch.Tensor]:
        levels = [h]
        for scale in range(1, c.scales):
            offsets = [2 ** (scale - 1) * lattice_offset(u, c.side) for u in CORNERS]
            levels.append(_corner_mean(_delays(levels[-1], offsets)))
        return levels

    def message(q: torch.Tensor, n: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        scores = (q[..., None, :] @ n.transpose(-1, -2))[..., 0, :] / math.sqrt(q.shape[-1])
        bias = b.scale_bias.repeat_interleave(len(c.bonds) // c.scales)
        scores = (scores + bias).masked_fill(~valid, float("-inf"))
        return (torch.softmax(scores, -1)[..., None, :] @ n)[..., 0, :]

    T = x.shape[1]
    valid = torch.arange(T)[:, None] >= b.bond_offset[None, :]
    q, h = b.q_proj(x), b.v_proj(x)
    lam = torch.sigmoid(b.mixing)
    by_scale = [(scale, [o for ell, o in c.bonds if ell == scale]) for scale in range(c.scales)]
    for _ in range(c.rounds):
        levels = pooled(h)
        n = torch.cat([torch.stack(_delays(levels[scale], offsets), 2) for scale, offsets in by_scale], 2)
        h = h + lam * (message(q, n, valid) - h)
    return b.o_proj(h)


# -- the checks ---------------------------------------------------------------------------------
def _perturbed(kind: str, params: dict, bias: bool, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    block = block_config(kind, params, d_model=12, max_len=64, bias=bias).build().double()
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return block


def assert_same_function(
    block: torch.nn.Module, reference: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
) -> None:
    weight = torch.randn_like(x)
    results = []
    for forward in (block, reference):
        block.zero_grad()
        y = forward(x)
        (y * weight).sum().backward()
        grads = {n: p.grad.clone() for n, p in block.named_parameters() if p.grad is not None}
        results.append((y.detach(), grads))
    (y_new, g_new), (y_old, g_old) = results
    # relative to the tensor's largest entry, floored at 1e-3 of the largest gradient (an
    # exactly-zero gradient, such as a bias the softmax cancels, is rounding noise in both)
    floor = 1e-3 * max(float(g.abs().max()) for g in g_old.values())
    for what, new, old in [("output", y_new, y_old)] + [(f"grad {n}", g_new[n], g_old[n]) for n in g_old]:
        err = float((new - old).abs().max()) / max(float(old.abs().max()), floor)
        assert err < RTOL, f"{what}: relative difference {err:.3e}"
    assert g_new.keys() == g_old.keys() == {n for n, _ in block.named_parameters()}


TETRA = [
    ({}, 64, False),
    ({"scales": 3, "neighbours": 5}, 50, True),
    ({"scales": 1, "neighbours": 8}, 64, False),
    ({"scales": 4, "neighbours": 6}, 30, True),
    ({"scales": 2, "neighbours": 4, "reach": 2.0}, 3, False),
    ({}, 1, True),
]


@pytest.mark.parametrize(("params", "T", "bias"), TETRA)
def test_tetra_equals_the_frozen_reference(params: dict, T: int, bias: bool) -> None:
    block = _perturbed("tetra", params, bias, seed=T)
    assert isinstance(block, TetraMesh)
    x = torch.randn(3, T, 12, dtype=torch.float64)
    assert_same_function(block, lambda x: _ref_tetra(block, x), x)


# -- frozen reference: TetraReach.forward round by round, as before ---------------------------
def _ref_reach(b: TetraReach, x: torch.Tensor) -> torch.Tensor:
    T = x.shape[1]
    valid = torch.arange(T)[:, None] >= b.offset[None, :]
    h = x
    for r in range(b.cfg.rounds):
        k, v = b.k_proj(h), b.v_proj(h)
        index = (torch.arange(T)[:, None] - b.offset[None, :]).clamp(min=0)
        k_n, v_n = k[:, index], v[:, index]
        q = b.q_proj(h)[..., None, :]
        scores = (q @ k_n.transpose(-1, -2))[..., 0, :] / math.sqrt(h.shape[-1])
        scores = (scores + b.bond[r]).masked_fill(~valid, float("-inf"))
        message = (torch.softmax(scores, -1)[..., None, :] @ v_n)[..., 0, :]
        h = h + b.o_proj(message)
    return h - x


REACH = [
    ({}, 64, False),
    ({"window": 3, "stride": 3, "levels": 3, "rounds": 3}, 40, True),
    ({"window": 0, "stride": 2, "levels": 4, "rounds": 1}, 17, False),
    ({"window": 5, "stride": 8, "levels": 2, "rounds": 2}, 6, True),
    ({}, 1, False),
]


@pytest.mark.parametrize(("params", "T", "bias"), REACH)
def test_tetra_reach_equals_the_frozen_reference(params: dict, T: int, bias: bool) -> None:
    block = _perturbed("tetra_reach", params, bias, seed=T)
    assert isinstance(block, TetraReach)
    x = torch.randn(3, T, 12, dtype=torch.float64)
    assert_same_function(block, lambda x: _ref_reach(block, x), x)
