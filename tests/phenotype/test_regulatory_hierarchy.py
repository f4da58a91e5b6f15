"""Regulatory hierarchies in the phenotype: one regulator gating another's signal.

The equation (`phenotype.blocks.regulation`, "Hierarchies"): ŝ_R = s_R · Π_{Q→R} G_QR(ŝ_Q)
with G = σ(w·ŝ + b) for `activates` and 1 - σ(w·ŝ + b) for `represses`; a coding region's
updates are scaled by the gates read from the ŝ of its regulators. Checked against a
float64 reference written here from the weights alone, and for the model contract
(step ≡ forward, causality, gradients, accounting = the built module).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import account, decode
from dogma_evolve.phenotype.model import DogmaModel
from tests.phenotype.phenotype_helpers import counted_flops, kernels_unseen

B, T, V, D = 2, 7, 23, 16
STRUCTURAL = {"d_model": D, "vocab": V, "max_len": 16}


def _b(base: str, kind: str, **params: Any) -> dict[str, Any]:
    return {"base": base, "kind": kind, "params": params}


def two_level(with_cascade: bool = True) -> Genome:
    """r1 -> r2 (activates) -> c1 (represses): r1 reaches c1 only through r2."""
    edges = [{"source": "r2", "target": "c1", "kind": "represses"}]
    if with_cascade:
        edges.insert(0, {"source": "r1", "target": "r2", "kind": "activates"})
    return Genome.from_dict(
        {
            "regions": [
                {"id": "s0", "type": "structural", "settings": STRUCTURAL},
                {"id": "r1", "type": "regulatory", "bases": [_b("C", "gate", hidden=3)]},
                {"id": "r2", "type": "regulatory", "bases": [_b("C", "gate", hidden=2)]},
                {"id": "c1", "type": "coding", "bases": [_b("A", "mlp", hidden=8)]},
            ],
            "edges": edges,
        }
    )


def _model(genome: Genome, seed: int = 0) -> DogmaModel:
    torch.manual_seed(seed)
    model = decode(genome).double().eval()
    with torch.no_grad():  # away from the init, so that every gate is far from 0.5
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def reference_logits(model: DogmaModel, ids: torch.Tensor, with_cascade: bool) -> torch.Tensor:
    """The two-level genome's logits computed by hand from its weights (float64).

    The coding block f and the norms are the model's own modules (they are not what is
    tested here); every regulatory quantity is written out."""
    p = dict(model.named_parameters())
    x = p["embed.weight"][ids]  # rope: no additive positions
    s1 = F.silu(x @ p["stages.r1.0.signal.weight"].T + p["stages.r1.0.signal.bias"])  # (B, T, 3)
    s2 = F.silu(x @ p["stages.r2.0.signal.weight"].T + p["stages.r2.0.signal.bias"])  # (B, T, 2)
    if with_cascade:
        g12 = torch.sigmoid(s1 @ p["edge_gates.r1__r2.proj.weight"].T + p["edge_gates.r1__r2.proj.bias"])
        s2 = s2 * g12  # r1 activates r2: r2's signal scaled by r1's gate
    g = 1 - torch.sigmoid(s2 @ p["edge_gates.r2__c1.proj.weight"].T + p["edge_gates.r2__c1.proj.bias"])
    layer = model.stages["c1"][0]
    x = x + g * layer.mixer(layer.norm(x))  # pre-norm residual, strength 1
    return model.final_norm(x) @ p["embed.weight"].T  # tied head


@pytest.mark.parametrize("with_cascade", [True, False])
def test_two_level_hierarchy_equals_the_hand_computed_reference(with_cascade):
    model = _model(two_level(with_cascade))
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(
            model(ids), reference_logits(model, ids, with_cascade), rtol=1e-12, atol=1e-12
        )


def _logits_after_r1_changes(genome: Genome) -> tuple[torch.Tensor, torch.Tensor]:
    model = _model(genome)
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        before = model(ids)
        model.stages["r1"][0].signal.weight.mul_(-2.0)  # only r1's weights change
        return before, model(ids)


def test_the_first_regulator_reaches_the_coding_region_only_through_the_cascade():
    before, after = _logits_after_r1_changes(two_level(with_cascade=True))
    assert (before - after).abs().max() > 1e-3  # r1 -> r2 -> c1: r1's weights move c1's gate
    before, after = _logits_after_r1_changes(two_level(with_cascade=False))
    assert torch.equal(before, after)  # no r1 -> r2 edge: r1 regulates nothing


def test_a_fully_repressed_regulator_sends_the_zero_signal():
    """G12 -> 0 makes ŝ2 = 0, so c1's gate falls back to its bias: 1 - σ(b)."""
    genome = two_level()
    doc = genome.to_dict()
    doc["edges"][0]["kind"] = "represses"
    model = _model(Genome.from_dict(doc))
    with torch.no_grad():
        edge = model.edge_gates["r1__r2"].proj
        edge.weight.zero_()
        edge.bias.fill_(60.0)  # 1 - σ(60) = 0 in float64 to 1e-26
        twin = _model(Genome.from_dict(doc))
        twin.load_state_dict(model.state_dict())
        twin.stages["r2"][0].signal.weight.zero_()
        twin.stages["r2"][0].signal.bias.fill_(-1e4)  # silu(-1e4) = 0: r2 silent by its own hand
        ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(3))
        torch.testing.assert_close(model(ids), twin(ids), rtol=0, atol=1e-12)


# -- a deeper, mixed hierarchy: the model contract --------------------------------------------
MIXED = {
    "regions": [
        {"id": "s0", "type": "structural", "settings": STRUCTURAL},
        {"id": "r0", "type": "regulatory", "bases": [_b("C", "allosteric", k=1, width=4)]},
        {"id": "r1", "type": "regulatory", "bases": [_b("C", "gate", hidden=3)]},
        {"id": "c1", "type": "coding", "bases": [_b("T", "attention", heads=2), _b("A", "mlp", hidden=8)]},
        {"id": "r2", "type": "regulatory", "bases": [_b("C", "gate", hidden=2), _b("C", "gate", hidden=4)]},
        {"id": "r3", "type": "regulatory", "bases": [_b("C", "gate", hidden=5)]},
        {"id": "p2", "type": "promoter", "settings": {"copies": 2}},
        {"id": "c2", "type": "coding", "bases": [_b("T", "mamba", d_state=4)]},
    ],
    "edges": [
        {"source": "r0", "target": "r1", "kind": "activates"},  # a router-only source: a bias gate
        {"source": "r1", "target": "r2", "kind": "represses"},
        {"source": "r1", "target": "r3", "kind": "activates"},
        {"source": "r2", "target": "r3", "kind": "activates"},  # r3 has two regulators
        {"source": "r1", "target": "c1", "kind": "activates"},
        {"source": "r3", "target": "c2", "kind": "represses"},
        {"source": "r2", "target": "c2", "kind": "activates"},
    ],
}


def test_a_deep_hierarchy_steps_as_it_runs_and_trains_every_parameter():
    genome = Genome.from_dict(MIXED)
    model = _model(genome)
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        logits = model(ids)
        state = model.init_state(B)
        steps = []
        for t in range(T):
            out, state = model.step(ids[:, t], state)
            steps.append(out)
    torch.testing.assert_close(torch.stack(steps, 1), logits, rtol=1e-9, atol=1e-9)
    with torch.no_grad():  # causal: a later token changes no earlier logit
        later = ids.clone()
        later[:, 4:] = (later[:, 4:] + 1) % V
        torch.testing.assert_close(model(later)[:, :4], logits[:, :4], rtol=0, atol=1e-12)
    model.train()
    out = model(ids)
    weights = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(5))
    (out * weights).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {name}"
    assert {"r0__r1", "r1__r2", "r1__r3", "r2__r3"} <= set(model.edge_gates)


def test_accounting_of_the_cascade_gates_equals_the_built_module(monkeypatch):
    genome = Genome.from_dict(MIXED)
    model = decode(genome).eval()
    acct = account(genome, seq_len=T)
    assert acct.params == model.num_params()
    # The four regulator-to-regulator gates: w (the source's signal width) and b each.
    flat = Genome.from_dict({**MIXED, "edges": [e for e in MIXED["edges"] if e["target"][0] == "c"]})
    assert acct.params - account(flat, T).params == (0 + 1) + (3 + 1) + (3 + 1) + (6 + 1)
    assert acct.flops_per_token - account(flat, T).flops_per_token == 2 * (0 + 3 + 3 + 6)
    ids = torch.randint(0, V, (B, T))
    with kernels_unseen(monkeypatch):
        flops = counted_flops(model, ids)
    assert flops == B * T * (acct.flops_per_token - model.extra_flops_per_token())
