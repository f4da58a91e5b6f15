"""The genome as data: canonical form and id, validation with one-line reasons, presets."""

from __future__ import annotations

import copy

import pytest

from dogma_evolve.genome import PRESETS, Genome, GenomeError, preset


def tiny_doc() -> dict:
    return {
        "regions": [
            {"id": "s0", "type": "structural", "settings": {"d_model": 32, "vocab": 40}},
            {"id": "r1", "type": "regulatory", "bases": [{"base": "C", "kind": "gate"}]},
            {"id": "p1", "type": "promoter", "settings": {"copies": 2}},
            {
                "id": "c1",
                "type": "coding",
                "bases": [
                    {"base": "T", "kind": "attention", "params": {"heads": 4}},
                    {"base": "A", "kind": "swiglu"},
                ],
            },
            {"id": "c2", "type": "coding", "bases": [{"base": "T", "kind": "mamba"}]},
        ],
        "edges": [
            {"source": "r1", "target": "c1", "kind": "activates"},
            {"source": "c1", "target": "c2", "kind": "loop"},
        ],
    }


def test_canonical_form_fills_defaults_and_is_stable():
    g = Genome.from_dict(tiny_doc())
    again = Genome.from_yaml(g.to_yaml())
    assert again == g and again.id == g.id and len(g.id) == 64
    # Spelling out what was derived gives the same genome and id.
    explicit = tiny_doc()
    explicit["regions"][3]["bases"][0]["params"].update(kv_heads=4, head_dim=8)
    assert Genome.from_dict(explicit).id == g.id


def test_id_changes_with_any_gene():
    doc = tiny_doc()
    doc["regions"][3]["bases"][0]["params"]["heads"] = 2
    assert Genome.from_dict(doc).id != Genome.from_dict(tiny_doc()).id


def test_sequence_view_leads_every_base_with_its_type():
    view = Genome.from_dict(tiny_doc()).sequence_view()
    assert view.startswith("S[d=32 V=40")
    assert "P[x2]" in view and "T:attention" in view and "A:swiglu" in view
    assert "R[C:gate]" in view and "r1>c1:activates" in view


def _broken(mutate) -> dict:
    doc = copy.deepcopy(tiny_doc())
    mutate(doc)
    return doc


BAD = {
    "unknown base": (lambda d: d["regions"][3]["bases"][0].update(base="X"), "unknown base type"),
    "unknown kind": (lambda d: d["regions"][3]["bases"][0].update(kind="transformerz"), "unknown kind"),
    "kind on wrong base": (lambda d: d["regions"][3]["bases"][0].update(base="A"), "not allowed on a A base"),
    "dangling edge": (
        lambda d: d["edges"].append({"source": "r1", "target": "nowhere", "kind": "activates"}),
        "no region",
    ),
    "cyclic edge": (
        lambda d: d["edges"].append({"source": "c2", "target": "c1", "kind": "loop"}),
        "downstream",
    ),
    "non-integer": (lambda d: d["regions"][3]["bases"][0]["params"].update(heads=4.0), "must be an integer"),
    "string number": (lambda d: d["regions"][0]["settings"].update(d_model="32"), "must be an integer"),
    "absurd width": (lambda d: d["regions"][0]["settings"].update(d_model=10**12), "above the maximum"),
    "bool as int": (lambda d: d["regions"][2]["settings"].update(copies=True), "must be an integer"),
    "heads not dividing": (
        lambda d: d["regions"][3]["bases"][0]["params"].update(heads=5),
        "does not divide",
    ),
    "promoter at end": (
        lambda d: d["regions"].append({"id": "p9", "type": "promoter", "settings": {}}),
        "followed by a coding region",
    ),
    "no structural": (lambda d: d["regions"].pop(0), "exactly one structural"),
    "duplicate ids": (lambda d: d["regions"][4].update(id="c1"), "duplicate region id"),
    "A base in regulatory": (
        lambda d: d["regions"][1]["bases"].append({"base": "A", "kind": "mlp"}),
        "cannot live in a regulatory region",
    ),
    "shares incompatible": (
        lambda d: d["edges"].append({"source": "c1", "target": "c2", "kind": "shares"}),
        "duplicate edge",
    ),
    "unknown field": (lambda d: d["regions"][0].update(extra=1), "unknown field"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_validation_refuses_with_one_line_reason(name):
    mutate, fragment = BAD[name]
    with pytest.raises(GenomeError) as info:
        Genome.from_dict(_broken(mutate))
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message and len(message) < 300


def test_layer_budget_is_enforced():
    doc = tiny_doc()
    doc["regions"][2]["settings"]["copies"] = 512
    doc["regions"][3]["bases"] *= 4  # 512 copies x 8 bases = 4096 layers
    with pytest.raises(GenomeError, match="layers"):
        Genome.from_dict(doc)


def test_shares_needs_identical_genes():
    doc = tiny_doc()
    doc["regions"].append(
        {
            "id": "c3",
            "type": "coding",
            "bases": [
                {"base": "T", "kind": "attention", "params": {"heads": 2}},
                {"base": "A", "kind": "swiglu"},
            ],
        }
    )
    doc["edges"].append({"source": "c1", "target": "c3", "kind": "shares"})
    with pytest.raises(GenomeError, match="identical genes"):
        Genome.from_dict(doc)
    doc["regions"][-1]["bases"][0]["params"]["heads"] = 4
    assert Genome.from_dict(doc).edges[-1].kind == "shares"


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_valid_and_round_trip(name):
    g = preset(name)
    assert Genome.from_yaml(g.to_yaml()).id == g.id


def test_unknown_preset_is_a_one_line_error():
    with pytest.raises(GenomeError, match="unknown preset"):
        preset("gpt5")
