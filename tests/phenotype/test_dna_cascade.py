"""Strand-displacement cascades in the DNA block's path A (`dna` gene, `depth` Λ): the
cascade against a float64 reference of its mass-action equations written here, the layers
really coupled, concentrations physical, causality, recurrent form, accounting, and depth 1
unchanged for existing genomes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dogma_evolve.genome import GenomeError
from dogma_evolve.phenotype.blocks.dna import DNABlock, DNAConfig
from tests.phenotype.phenotype_helpers import block_genome, counted_flops, kernels_unseen

KW = {"width": 8, "reactions": 5, "d_state": 4, "species": 3, "lanes": 2, "window": 3}


def _block(depth: int, bias: bool = False, seed: int = 0) -> DNABlock:
    torch.manual_seed(seed)
    block = DNAConfig(16, bias, **KW, depth=depth).build().double().eval()
    if depth > 1:  # routing away from the identity, so every downstream gate mixes sources
        with torch.no_grad():
            block.routing.add_(torch.randn_like(block.routing))
    return block


def reference_cascade(block: DNABlock, x: torch.Tensor) -> torch.Tensor:
    """The cascade token by token and reaction by reaction, as the chemistry reads: the free
    gates (1 - G') lose the displaced fraction 1 - e^{-kι} of themselves, which is released
    as output strand; then the gates relax towards loaded (e^{-γ}) and outputs decay
    (e^{-δ}); a downstream gate's input is the upstream outputs, each split among the
    downstream gates by softmax over the column of Θ. x: (B, T, D) -> O: (B, T, Λ, R)."""
    depth, R = block.cfg.depth, block.cfg.reactions
    rates = [(block.k_log, block.gamma_log, block.delta_log)]
    for i in range(depth - 1):
        rates.append((block.cascade_k_log[i], block.cascade_gamma_log[i], block.cascade_delta_log[i]))
    first = F.softplus(x @ block.input_strands.weight.T + block.input_strands.bias)
    B, T = x.shape[:2]
    depleted = [[[0.0] * R for _ in range(depth)] for _ in range(B)]
    released = [[[0.0] * R for _ in range(depth)] for _ in range(B)]
    out = torch.zeros(B, T, depth, R, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            for layer in range(depth):
                k_log, gamma_log, delta_log = rates[layer]
                if layer == 0:
                    iota = [float(first[b, t, r]) for r in range(R)]
                else:
                    theta, upstream = block.routing[layer - 1], released[b][layer - 1]
                    column = [sum(math.exp(theta[u, s]) for u in range(R)) for s in range(R)]
                    iota = [
                        sum(math.exp(theta[r, s]) / column[s] * upstream[s] for s in range(R))
                        for r in range(R)
                    ]
                gates, strands = depleted[b][layer], released[b][layer]
                for r in range(R):
                    consumed = (1.0 - gates[r]) * (1.0 - math.exp(-math.exp(k_log[r]) * iota[r]))
                    gates[r] = math.exp(-math.exp(gamma_log[r])) * (gates[r] + consumed)
                    strands[r] = math.exp(-math.exp(delta_log[r])) * strands[r] + consumed
                    out[b, t, layer, r] = strands[r]
    return out


@pytest.mark.parametrize("depth", [1, 3])
def test_cascade_matches_a_float64_reference_of_its_equations(depth):
    block = _block(depth, bias=True)
    x = 2 * torch.randn(2, 9, 16, dtype=torch.float64)
    with torch.no_grad():
        got = block.strand_cascade(x)
        expected = reference_cascade(block, x)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(block._path_A(x), block.out_A(expected[:, :, -1]), rtol=1e-10, atol=1e-12)


def test_downstream_reactions_run_on_upstream_products():
    block = _block(2)
    x = torch.randn(1, 12, 16, dtype=torch.float64)
    with torch.no_grad():
        before = block.strand_cascade(x)
        block.k_log.add_(1.0)  # layer 1 displaces faster
        after = block.strand_cascade(x)
        assert (after[:, :, 0] - before[:, :, 0]).abs().max() > 1e-3
        assert (after[:, :, 1] - before[:, :, 1]).abs().max() > 1e-3  # layer 2 sees it
        block.k_log.sub_(1.0)
        block.cascade_k_log.add_(1.0)  # layer 2 faster: layer 1 does not see it
        later = block.strand_cascade(x)
        torch.testing.assert_close(later[:, :, 0], before[:, :, 0], rtol=0, atol=0)
        assert (later[:, :, 1] - before[:, :, 1]).abs().max() > 1e-3
    # The layer-2 outputs at t are a function of the layer-1 outputs up to t: zero layer 1's
    # products (no input strands at all) and layer 2 releases nothing.
    x = x.clone().requires_grad_()
    (grad,) = torch.autograd.grad(block.strand_cascade(x)[0, 6, 1].sum(), block.input_strands.weight)
    assert grad.abs().sum() > 0
    with torch.no_grad():
        block.input_strands.weight.zero_()
        block.input_strands.bias.fill_(-1e3)  # softplus -> 0: no layer-1 input strands
        silent = block.strand_cascade(x)
    assert silent.abs().max() < 1e-12


def test_concentrations_stay_non_negative_and_bounded_and_routing_conserves_strands():
    block = _block(3)
    x = 6 * torch.randn(2, 200, 16, dtype=torch.float64)
    state = block.init_state(2)
    with torch.no_grad():
        bound = 1 / -torch.expm1(-torch.exp(torch.cat([block.delta_log[None], block.cascade_delta_log])))
        for t in range(200):
            _, state = block.step(x[:, t], state)
            assert ((state["depleted"] >= 0) & (state["depleted"] <= 1)).all()
            assert ((state["released"] >= 0) & (state["released"] <= bound)).all()
        upstream = state["released"][:, 0]
        routed = block._input_strands(x[:, -1], 1, upstream)
        torch.testing.assert_close(routed.sum(-1), upstream.sum(-1), rtol=1e-12, atol=0)


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_shapes_causality_and_step_equal_forward(depth):
    block = _block(depth).train()
    x = torch.randn(2, 13, 16, dtype=torch.float64)
    y = block._path_A(x)
    x2 = x.clone()
    x2[:, 7:] += 1.0
    torch.testing.assert_close(block._path_A(x2)[:, :7], y[:, :7], rtol=0, atol=1e-12)
    assert y.shape == (2, 13, 16)
    block.eval()
    with torch.no_grad():
        y = block(x)
        state, steps = block.init_state(2), []
        for t in range(13):
            y_t, state = block.step(x[:, t], state)
            steps.append(y_t)
    torch.testing.assert_close(torch.stack(steps, 1), y, rtol=1e-10, atol=1e-10)
    assert sum(v.numel() for v in state.values()) == 2 * block.state_size(13)
    assert state["depleted"].shape == state["released"].shape == (2, depth, 5)


def test_accounting_counts_the_cascade(monkeypatch):
    one, three = DNAConfig(16, False, **KW, depth=1), DNAConfig(16, False, **KW, depth=3)
    R = KW["reactions"]
    # Per extra layer: Θ (R x R) and k, γ, δ; one R x R routing product per token; 2R state.
    assert three.num_params() - one.num_params() == 2 * (R * R + 3 * R)
    block = _block(3)
    assert sum(p.numel() for p in block.parameters()) == three.num_params()
    assert three.state_fixed() - one.state_fixed() == 2 * 2 * R
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    with kernels_unseen(monkeypatch):
        dense_one = counted_flops(_block(1), x)
        dense_three = counted_flops(block, x)
    assert dense_three - dense_one == 2 * 7 * 2 * (2 * R * R)
    assert dense_three == 2 * 7 * (three.flops_per_token(7) - three.extra_flops_per_token())
    assert three.extra_flops_per_token() - one.extra_flops_per_token() == 2 * 10 * R


def test_depth_one_keeps_the_genome_ids_of_before():
    plain = block_genome("dna", {"reactions": 6})
    assert plain.id == block_genome("dna", {"reactions": 6, "depth": 1}).id
    assert "depth" not in plain.regions[-1].bases[0].gene.as_dict
    deep = block_genome("dna", {"reactions": 6, "depth": 3})
    assert deep.regions[-1].bases[0].gene.get("depth") == 3 and deep.id != plain.id
    with pytest.raises(GenomeError, match="depth=0 is below the minimum"):
        block_genome("dna", {"depth": 0})
