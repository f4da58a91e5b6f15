"""Mixture of experts: the load-balancing loss, routing and the model's aux_loss()."""

from __future__ import annotations

import torch

from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import decode
from dogma_evolve.phenotype.blocks.moe import MoEConfig, load_balancing_loss
from tests.phenotype.phenotype_helpers import genome_doc


def test_balancing_loss_is_top_k_under_uniform_routing_and_experts_under_collapse():
    n, experts = 64, 8
    for k in (1, 2, 3):
        uniform = torch.full((n, experts), 1.0 / experts)
        # Balanced dispatch: token i goes to experts i, i+1, ... (mod E).
        top = (torch.arange(n)[:, None] + torch.arange(k)[None, :]) % experts
        assert torch.isclose(load_balancing_loss(uniform, top), torch.tensor(float(k)))
        collapsed = torch.zeros(n, experts)
        collapsed[:, 0] = 1.0
        top = torch.arange(k).expand(n, k)
        assert torch.isclose(load_balancing_loss(collapsed, top), torch.tensor(float(experts)))


def test_moe_equals_dense_mixture_of_its_top_k_experts():
    cfg = MoEConfig.of(16, experts=5, top_k=2, hidden=12, expert="swiglu", shared=1)
    torch.manual_seed(0)
    moe = cfg.build().double()
    x = torch.randn(3, 7, 16, dtype=torch.float64)
    with torch.no_grad():
        probs = torch.softmax(x @ moe.router.weight.T, -1)
        top_p, top_i = probs.topk(2, -1)
        gates = torch.zeros_like(probs).scatter(-1, top_i, top_p / top_p.sum(-1, keepdim=True))
        dense = sum(gates[..., e, None] * moe.experts[e](x) for e in range(5)) + moe.shared(x)
        torch.testing.assert_close(moe(x), dense)
    assert cfg.active_params() == 16 * 5 + 2 * 3 * 16 * 12 + 3 * 16 * 12


def test_model_aux_loss_sums_the_moe_layers():
    doc = genome_doc(
        [
            {"base": "T", "kind": "attention", "params": {"heads": 2}},
            {"base": "A", "kind": "moe", "params": {"experts": 4, "hidden": 16, "aux_weight": 0.5}},
        ],
        copies=2,
    )
    model = decode(Genome.from_dict(doc))
    assert model.aux_loss().item() == 0.0
    logits = model(torch.randint(0, 61, (2, 9)))
    moes = [m for m in model.modules() if hasattr(m, "last_aux_loss")]
    assert len(moes) == 2
    total = model.aux_loss()
    torch.testing.assert_close(total, sum(m.last_aux_loss for m in moes))
    assert 0.5 * 2 * 2 <= total.item() <= 0.5 * 2 * 4 + 1e-6  # between top_k and E per layer
    (logits.sum() * 0 + total).backward()
    assert moes[0].router.weight.grad.abs().sum() > 0

    plain = decode(Genome.from_dict(genome_doc([{"base": "A", "kind": "mlp", "params": {}}])))
    plain(torch.randint(0, 61, (1, 4)))
    assert plain.aux_loss().item() == 0.0
