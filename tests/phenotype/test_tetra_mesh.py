"""The volumetric TetraMemory (gene kind `tetra`): its mesh covers every prefix after its rounds
(reachability computed from the bond structure, up to 4096 tokens), the module is causal,
its recurrent form equals its parallel form, and its parameters and FLOPs are the ones the
equations give. The registry contract (tests/phenotype/test_blocks.py) runs on it too."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from dogma_evolve.genome import GenomeError
from dogma_evolve.genome.kinds import tetra as gene
from dogma_evolve.phenotype.blocks import tetra_mesh as block
from dogma_evolve.phenotype.blocks.tetra_mesh import TetraMeshConfig
from tests.phenotype.phenotype_helpers import block_config, block_genome, counted_flops

LENGTHS = (1, 2, 8, 9, 27, 64, 65, 200, 512, 1000, 2048, 4096)


def _config(max_len: int = 64, d_model: int = 16, bias: bool = False, **params) -> TetraMeshConfig:
    cfg = block_config("tetra", params, d_model=d_model, max_len=max_len, bias=bias)
    assert isinstance(cfg, TetraMeshConfig)
    return cfg


def _reached(offsets: list[int], rounds: int, length: int) -> torch.Tensor:
    """reached[s]: token t hears from token t - s within `rounds` rounds, through bonds
    (pooling, which only widens what a bond reads, left out)."""
    reached = torch.zeros(length, dtype=torch.bool)
    reached[0] = True
    for _ in range(rounds):
        grown = reached.clone()
        for o in offsets:
            if 0 < o < length:
                grown[o:] |= reached[:-o]
        reached = grown
    return reached


def test_the_gene_and_the_block_compute_one_geometry():
    for n in (*LENGTHS, 3, 26, 28, 343, 1 << 24):
        assert gene.mesh_side(n) == block.mesh_side(n)
        side = gene.mesh_side(n)
        assert side**3 >= n and (side == 1 or (side - 1) ** 3 < n)
        for k in range(4, 9):
            for s in range(1, 5):
                for reach in (0.0, 1.0, 3.5):
                    assert gene.propagation_rounds(k, s, reach, n) == block.mesh_rounds(k, s, reach, n)


@pytest.mark.parametrize("neighbours", range(4, 9))
@pytest.mark.parametrize("scales", range(1, 5))
def test_after_the_rounds_every_token_has_heard_its_whole_prefix(neighbours, scales):
    for n in LENGTHS:
        cfg = _config(max_len=n, neighbours=neighbours, scales=scales)
        assert cfg.rounds == gene.cover_rounds(neighbours, scales, n)
        reached = _reached([o for _, o in cfg.bonds], cfg.rounds, n)
        assert reached.all(), f"T={n}: {int((~reached).sum())} earlier tokens unheard"


def test_the_full_cube_needs_every_round_and_rounds_grow_as_the_cube_root():
    cfg = _config(max_len=4096, neighbours=8, scales=1)  # L = 16, R = 15
    offsets = [o for _, o in cfg.bonds]
    assert (cfg.side, cfg.rounds) == (16, 15)
    assert not _reached(offsets, cfg.rounds - 1, 4096)[4095]  # (15, 15, 15) takes 15 steps
    for k in (4, 8):
        small, large = (_config(max_len=n, neighbours=k, scales=1).rounds for n in (512, 8 * 512))
        assert (small, large) == ((8 - 1) * gene.STEP_FACTOR[k], (16 - 1) * gene.STEP_FACTOR[k])


def test_a_set_reach_gives_cube_root_rounds_and_must_cover_the_prefix():
    cfg = _config(max_len=1000, neighbours=8, scales=1, reach=1.5)
    assert cfg.rounds == math.ceil(1.5 * 10) == 15
    with pytest.raises(GenomeError, match="needs 9"):
        block_genome("tetra", {"neighbours": 8, "scales": 1, "reach": 0.5}, max_len=1000)
    # reach 0 stays 0: the genome's id does not depend on its context length.
    a, b = (block_genome("tetra", {}, max_len=n) for n in (64, 4096))
    assert a.regions[-1].bases[0].gene.params == b.regions[-1].bases[0].gene.params


def test_output_hears_every_earlier_token_and_no_later_one():
    cfg = _config(max_len=64, d_model=8, neighbours=5, scales=2)
    torch.manual_seed(0)
    module = cfg.build().double().eval()
    x = torch.randn(1, 64, 8, dtype=torch.float64, requires_grad=True)
    for t in (0, 17, 63):
        (grad,) = torch.autograd.grad(module(x)[0, t].sum(), x)
        heard = grad[0].abs().sum(-1) > 0
        assert heard[: t + 1].all() and not heard[t + 1 :].any(), t


@pytest.mark.parametrize(
    ("params", "max_len", "bias"),
    [({"neighbours": 4, "scales": 3}, 40, True), ({"neighbours": 7, "scales": 1, "reach": 2.5}, 30, False)],
)
def test_step_equals_forward_and_the_counts_follow_the_equations(params, max_len, bias, monkeypatch):
    cfg = _config(max_len=max_len, d_model=12, bias=bias, **params)
    torch.manual_seed(1)
    module = cfg.build().double().eval()
    T = max_len
    x = torch.randn(2, T, 12, dtype=torch.float64)
    with torch.no_grad():
        y = module(x)
        state, steps = module.init_state(2), []
        for t in range(T):
            y_t, state = module.step(x[:, t], state)
            steps.append(y_t)
    torch.testing.assert_close(torch.stack(steps, 1), y, rtol=1e-10, atol=1e-10)

    # Parameters by hand: W_q, W_v, W_o, one bias per scale, one mixing rate per channel.
    d, k, s = 12, params["neighbours"], params["scales"]
    assert sum(p.numel() for p in module.parameters()) == 3 * (d * d + bias * d) + s + d
    assert cfg.num_params() == 3 * (d * d + bias * d) + s + d
    # FLOPs by hand: three D x D projections, then per round the K scores and the K-term
    # message, each a length-D dot product (2 FLOPs per multiply-add).
    dense = 3 * 2 * d * d + cfg.rounds * (2 * k * s * d + 2 * k * s * d)
    assert cfg.flops_per_token(T) - cfg.extra_flops_per_token() == dense
    assert counted_flops(module, x) == 2 * T * dense


def test_state_is_what_the_recurrence_keeps():
    cfg = _config(max_len=64, d_model=8, neighbours=8, scales=2)  # L = 4, cube offset 21
    assert cfg.history == (21, 42)
    assert cfg.state_fixed() == cfg.rounds * 8 * 63
    assert cfg.state_elements(5) == cfg.state_fixed()


def test_a_coarse_site_is_the_mean_of_its_cube_of_fine_sites():
    cfg = _config(max_len=125, d_model=8, neighbours=8, scales=3)  # L = 5
    module = cfg.build().double()
    h = torch.randn(2, 125, 8, dtype=torch.float64)
    coarse = module._pooled(h)[2]  # spacing 4: a 4 x 4 x 4 cube of fine sites, 0 before the start
    padded = torch.cat([torch.zeros(2, 125, 8, dtype=torch.float64), h], 1)
    cube = [a + 5 * b + 25 * c for a in range(4) for b in range(4) for c in range(4)]
    expected = torch.stack([padded[:, 125 - o : 250 - o] for o in cube]).mean(0)
    torch.testing.assert_close(coarse, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("neighbours", "scales"), [(4, 1), (8, 3), (8, 1)])
def test_the_built_module_hears_what_the_bonds_reach(neighbours, scales):
    """The gradient of the last output of a 512-token context reaches every token; on one
    scale (no pooling), with one round fewer it reaches exactly what the bonds reach in
    that many rounds, which is not everything (the full cube misses 7 + 7·8 + 7·64 back)."""
    cfg = _config(max_len=512, d_model=8, neighbours=neighbours, scales=scales)
    torch.manual_seed(0)
    x = torch.randn(1, 512, 8, dtype=torch.float64, requires_grad=True)
    for c in (cfg, dataclasses.replace(cfg, rounds=cfg.rounds - 1)):
        module = c.build().double()
        (grad,) = torch.autograd.grad(module(x)[0, -1].sum(), x)
        heard = (grad[0].abs().sum(-1) > 0).flip(0)  # heard[s]: the token s back
        if c is cfg:
            assert heard.all(), int((~heard).sum())
        elif scales == 1:
            reached = _reached([o for _, o in c.bonds], c.rounds, 512)
            assert torch.equal(heard, reached) and not reached[511]
