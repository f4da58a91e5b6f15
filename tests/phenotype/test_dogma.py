"""DOGMA modules: the four-path DNA block's paths one by one (causal in training too, with
the stochastic path sampling), the stochastic path's expectation, concentration bounds of
the strand-displacement path, and the strand-attention energy."""

from __future__ import annotations

import pytest
import torch

from dogma_evolve.phenotype.blocks.dna import DNAConfig, lane_distributions, prefix_products
from dogma_evolve.phenotype.blocks.strand import StrandAttentionConfig

CFG = DNAConfig(16, False, width=8, reactions=5, d_state=4, species=3, lanes=2, window=3, depth=1)


def _block():
    torch.manual_seed(0)
    return CFG.build().double()


@pytest.mark.parametrize("path", ["_path_A", "_path_B", "_path_C", "_path_D"])
def test_each_path_is_causal_and_passes_gradients_in_training(path):
    block = _block().train()
    x = torch.randn(2, 13, 16, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(5)
    y = getattr(block, path)(x)
    x2 = x.detach().clone()
    x2[:, 7:] += 1.0
    torch.manual_seed(5)  # the same Gumbel noise for path C
    y2 = getattr(block, path)(x2)
    torch.testing.assert_close(y2[:, :7], y[:, :7], rtol=0, atol=1e-12)
    y.sum().backward()
    assert x.grad.abs().sum() > 0


def test_stochastic_path_samples_average_to_the_evaluation_expectation():
    block = _block()
    x = torch.randn(1, 3, 16, dtype=torch.float64)
    block.eval()
    expected = prefix_products(block._transition(x))[..., 0]  # (1, 3, L, S)
    block.train()
    torch.manual_seed(0)
    xs = x.expand(4000, -1, -1)
    with torch.no_grad():
        sampled = prefix_products(block._transition(xs))[..., 0]
    torch.testing.assert_close(sampled, sampled.round())  # molecules, not mixtures
    torch.testing.assert_close(sampled.mean(0), expected[0], rtol=0, atol=0.04)


def test_the_lane_loop_equals_the_doubling_scan_values_and_gradients():
    """Path C on CPU steps p_t = M_t p_{t-1}; the doubling scan (the CUDA path) gives the
    same distributions and the same gradients, float64."""
    torch.manual_seed(1)
    m = torch.softmax(torch.randn(3, 37, 2, 4, 4, dtype=torch.float64), -2).requires_grad_()
    loop = lane_distributions(m)
    doubling = prefix_products(m)[..., 0]
    torch.testing.assert_close(loop, doubling, rtol=1e-12, atol=1e-14)
    assert torch.allclose(loop.sum(-1), torch.ones(3, 37, 2, dtype=torch.float64))
    cotangent = torch.randn_like(loop)
    (got,) = torch.autograd.grad(loop, m, cotangent)
    (want,) = torch.autograd.grad(doubling, m, cotangent)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_strand_displacement_concentrations_stay_physical():
    block = _block().eval()
    x = 4 * torch.randn(2, 50, 16, dtype=torch.float64)
    state = block.init_state(2)
    with torch.no_grad():
        for t in range(50):
            _, state = block.step(x[:, t], state)
            assert (state["depleted"] >= 0).all() and (state["depleted"] <= 1).all()
            assert (state["released"] >= 0).all()
            assert torch.allclose(state["lanes"].sum(-1), torch.ones(2, 2, dtype=torch.float64))
    assert block.species == ("A0", "T0", "C0", "G0")


def test_hybridisation_energy_is_a_learned_function_of_distance():
    cfg = StrandAttentionConfig.of(16, heads=2, kv_heads=2, head_dim=8, scales=3)
    att = cfg.build().double()
    with torch.no_grad():
        att.stacking.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 2.0]]))
    t = torch.arange(5)
    energy = att.hybridisation_energy(t[:, None] - t[None, :])
    d = torch.tensor(3.0, dtype=torch.float64)
    loop = -torch.nn.functional.softplus(att.entropy) * torch.log1p(d)
    torch.testing.assert_close(energy[:, 4, 1], loop + torch.stack([torch.exp(-d), 2 * torch.exp(-d / 4)]))
