"""The DNA block's CPU fast paths compute the function they replaced: path C's lane scan as an
autograd Function (`dna._LaneScan`) and the Gumbel-max draw through `max(...).indices`,
checked against a frozen copy of the earlier forward (the plain autograd loop over tokens and
`argmax`), in float64 on perturbed weights: the output and every parameter's gradient, in
training (the same draws under the same seed) and in evaluation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import dogma_evolve.kernels as kernels
from dogma_evolve.phenotype.blocks.dna import DNABlock, DNAConfig, lane_distributions

RTOL = 1e-10


# -- the frozen reference: the forward as it was before the fast paths ------------------------
def _ref_lanes(m: torch.Tensor) -> torch.Tensor:
    p = torch.zeros_like(m[:, 0, ..., 0])
    p[..., 0] = 1
    steps = []
    for t in range(m.shape[1]):
        p = (m[:, t] * p[..., None, :]).sum(-1)
        steps.append(p)
    return torch.stack(steps, 1)


def _ref_rates(b: DNABlock, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if layer == 0:
        return b.k_log, b.gamma_log, b.delta_log
    i = layer - 1
    return b.cascade_k_log[i], b.cascade_gamma_log[i], b.cascade_delta_log[i]


def _ref_cascade(b: DNABlock, x: torch.Tensor) -> torch.Tensor:
    def diagonal_scan(log_decay: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        batch, length, reactions = inputs.shape
        ones = inputs.new_ones(batch, reactions, length, 1)
        out, _ = kernels.gated_linear_recurrence(
            ones, ones, inputs.transpose(1, 2)[..., None], log_decay.transpose(1, 2)
        )
        return out[..., 0].transpose(1, 2)

    released = None
    layers = []
    for layer in range(b.cfg.depth):
        if layer == 0 or released is None:
            iota = F.softplus(b.input_strands(x))
        else:
            iota = F.linear(released, torch.softmax(b.routing[layer - 1], dim=0))
        k_log, gamma_log, delta_log = _ref_rates(b, layer)
        k_iota = torch.exp(k_log) * iota
        gamma = torch.exp(gamma_log)
        log_g, in_g, q = -k_iota - gamma, torch.exp(-gamma) * -torch.expm1(-k_iota), -torch.expm1(-k_iota)
        depleted = diagonal_scan(log_g, in_g)
        previous = torch.cat([torch.zeros_like(depleted[:, :1]), depleted[:, :-1]], 1)
        log_o = (-torch.exp(delta_log)).expand_as(q)
        released = diagonal_scan(log_o, (1 - previous) * q)
        layers.append(released)
    return torch.stack(layers, 2)


def _ref_forward(b: DNABlock, x: torch.Tensor) -> torch.Tensor:
    c = b.cfg
    y_a = b.out_A(_ref_cascade(b, x)[:, :, -1])
    parts = b.in_B(x).split([c.width, c.width, c.d_state, c.d_state], -1)
    u, delta, Bm, Cm = (z.transpose(1, 2) for z in parts)
    y = kernels.selective_scan(
        u, delta, -torch.exp(b.A_log), Bm, Cm, b.D, delta_bias=b.dt_bias, delta_softplus=True
    )
    y_b = b.out_B(y.transpose(1, 2))
    s = c.species
    logits = b.transitions(x).unflatten(-1, (c.lanes, s, s))
    m = torch.softmax(logits, dim=-2)
    if b.training:
        gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp_min(1e-20)))
        fired = F.one_hot((logits + gumbel).argmax(-2), s).transpose(-1, -2).to(m.dtype)
        m = fired + m - m.detach()
    y_c = b.out_C(_ref_lanes(m).flatten(-2))
    strand, complement, gate = b.in_D(x).chunk(3, -1)
    padded = F.pad(complement.transpose(1, 2), (c.window - 1, 0))
    paired = F.conv1d(padded, b.binding, groups=c.width).transpose(1, 2)
    y_d = b.out_D(torch.sigmoid(gate) * strand * paired)
    paths = torch.stack([y_a, y_b, y_c, y_d], -1)
    return (paths * torch.softmax(b.regulation(x), -1)[..., None, :]).sum(-1)


# -- the checks ---------------------------------------------------------------------------------
def _close(new: torch.Tensor, old: torch.Tensor, what: str) -> None:
    scale = old.abs().max().clamp_min(1e-300)
    err = float((new - old).abs().max() / scale)
    assert err < RTOL, f"{what}: relative difference {err:.3e}"


def _block(depth: int, bias: bool, seed: int) -> DNABlock:
    torch.manual_seed(seed)
    kw = {"width": 6, "reactions": 5, "d_state": 4, "species": 3, "lanes": 2, "window": 3, "depth": depth}
    block = DNAConfig(12, bias, **kw).build().double()
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return block


CASES = [(1, False, True), (3, True, True), (2, False, False)]


@pytest.mark.parametrize(("depth", "bias", "training"), CASES)
def test_forward_and_gradients_equal_the_frozen_reference(depth: int, bias: bool, training: bool) -> None:
    block = _block(depth, bias, seed=depth)
    block.train(training)
    x = torch.randn(3, 23, 12, dtype=torch.float64)
    weight = torch.randn(3, 23, 12, dtype=torch.float64)
    results = []
    for forward in (block.forward, lambda x: _ref_forward(block, x)):
        block.zero_grad()
        torch.manual_seed(99)  # the same Gumbel draws for both
        y = forward(x)
        (y * weight).sum().backward()
        grads = {n: p.grad.clone() for n, p in block.named_parameters() if p.grad is not None}
        results.append((y.detach(), grads))
    (y_new, g_new), (y_old, g_old) = results
    _close(y_new, y_old, "output")
    assert g_new.keys() == g_old.keys() == {n for n, _ in block.named_parameters()}
    for name in g_old:
        _close(g_new[name], g_old[name], f"grad {name}")


def test_lane_scan_equals_the_autograd_loop() -> None:
    torch.manual_seed(0)
    m = torch.softmax(torch.randn(4, 17, 3, 5, 5, dtype=torch.float64), -2).requires_grad_()
    g = torch.randn(4, 17, 3, 5, dtype=torch.float64)
    new = lane_distributions(m)
    (d_new,) = torch.autograd.grad((new * g).sum(), m)
    old = _ref_lanes(m)
    (d_old,) = torch.autograd.grad((old * g).sum(), m)
    assert torch.equal(new, old)  # the same float operations, in the same order
    _close(d_new, d_old, "dM")


def test_max_indices_are_argmax_with_ties() -> None:
    torch.manual_seed(0)
    z = torch.randint(0, 3, (64, 7, 5, 6)).float()  # many ties
    assert torch.equal(z.max(-2).indices, z.argmax(-2))


@pytest.mark.parametrize("kind", ["dna", "tetra", "tetra_reach"])
def test_a_torch_export_of_the_fast_blocks_runs_as_plain_ops(kind):
    """`evolve export` writes `model.pt2` with `torch.export`: the blocks' CPU fast paths (the
    lane scan's `out=` loop, TetraMemory's written-out backward) must give way to plain ops
    there (`kernels._dispatch.plain_ops_only`), or the exported program fails on weights that
    require gradients (the end-to-end export test's failure)."""
    from dogma_evolve.phenotype import decode
    from tests.phenotype.phenotype_helpers import block_genome

    torch.manual_seed(0)
    model = decode(block_genome(kind, d_model=32, vocab=29, max_len=16)).eval()
    ids = torch.randint(0, 29, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(ids)
    program = torch.export.export(model, (ids,)).module()
    got = program(ids)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
