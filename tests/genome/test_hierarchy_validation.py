"""Regulatory hierarchies as data: `activates`/`represses` between two regulatory regions.

A regulator may gate a later regulator's signal (the phenotype side is tested in
tests/phenotype/test_regulatory_hierarchy.py). Validation keeps the graph acyclic (every
edge points downstream) and refuses, in one line, an edge into a regulator that emits no
signal; genomes without such edges keep their canonical form, id and sequence view.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from dogma_evolve.genome import Genome, GenomeError


def _gate(hidden: int = 4) -> dict[str, Any]:
    return {"base": "C", "kind": "gate", "params": {"hidden": hidden}}


def cascade_doc() -> dict[str, Any]:
    """r1 -> r2 -> r3 -> c1, and r1 -> c1 directly: three regulatory levels."""
    return {
        "regions": [
            {"id": "s0", "type": "structural", "settings": {"d_model": 16, "vocab": 20}},
            {"id": "r1", "type": "regulatory", "bases": [_gate(3)]},
            {"id": "r2", "type": "regulatory", "bases": [_gate(2), _gate(5)]},
            {"id": "r3", "type": "regulatory", "bases": [_gate(4)]},
            {"id": "c1", "type": "coding", "bases": [{"base": "A", "kind": "swiglu"}]},
        ],
        "edges": [
            {"source": "r1", "target": "r2", "kind": "activates"},
            {"source": "r2", "target": "r3", "kind": "represses"},
            {"source": "r3", "target": "c1", "kind": "activates"},
            {"source": "r1", "target": "c1", "kind": "represses"},
        ],
    }


def test_a_cascade_is_a_valid_genome_with_a_stable_canonical_form():
    g = Genome.from_dict(cascade_doc())
    again = Genome.from_yaml(g.to_yaml())
    assert again == g and again.id == g.id
    kinds = {(e.source, e.target): e.kind for e in g.edges}
    assert kinds[("r1", "r2")] == "activates" and kinds[("r2", "r3")] == "represses"
    # The edge is serialised like any other edge: nothing new in the document's shape.
    assert {"source": "r1", "target": "r2", "kind": "activates"} in g.to_dict()["edges"]


def _refused(mutate) -> str:
    doc = copy.deepcopy(cascade_doc())
    mutate(doc)
    with pytest.raises(GenomeError) as info:
        Genome.from_dict(doc)
    message = str(info.value)
    assert "\n" not in message and len(message) < 200
    return message


def test_an_upstream_or_self_edge_between_regulators_is_refused():
    upstream = _refused(lambda d: d["edges"].append({"source": "r3", "target": "r1", "kind": "activates"}))
    assert "downstream" in upstream and "r3" in upstream
    # A cycle r2 -> r3 -> r2 needs one edge pointing upstream: refused the same way.
    cycle = _refused(lambda d: d["edges"].append({"source": "r3", "target": "r2", "kind": "represses"}))
    assert "downstream" in cycle
    self_edge = _refused(lambda d: d["edges"].append({"source": "r2", "target": "r2", "kind": "activates"}))
    assert "downstream" in self_edge


def test_an_edge_into_a_regulator_without_a_signal_is_refused():
    def allosteric_only(doc: dict[str, Any]) -> None:
        doc["regions"][3]["bases"] = [{"base": "C", "kind": "allosteric"}]

    message = _refused(allosteric_only)
    assert "r3" in message and "emits no signal" in message


def test_activates_still_starts_at_a_regulator_and_never_ends_at_structure():
    from_coding = _refused(lambda d: d["edges"].append({"source": "c1", "target": "r3", "kind": "activates"}))
    assert "regulatory" in from_coding

    def with_promoter(doc: dict[str, Any]) -> None:
        doc["regions"].insert(4, {"id": "p1", "type": "promoter", "settings": {"copies": 2}})
        doc["edges"].append({"source": "r3", "target": "p1", "kind": "represses"})

    assert "coding or regulatory" in _refused(with_promoter)
    shares = _refused(lambda d: d["edges"].append({"source": "r1", "target": "r3", "kind": "shares"}))
    assert "two coding regions" in shares


def test_the_sequence_view_labels_the_regulators_of_a_hierarchy():
    view = Genome.from_dict(cascade_doc()).sequence_view()
    assert "r1=R[C:gate(hidden=3)] r2=R[C:gate(hidden=2) C:gate(hidden=5)] r3=R[C:gate(hidden=4)]" in view
    assert view.endswith("| r1>r2:activates r2>r3:represses r3>c1:activates r1>c1:represses")
    flat = cascade_doc()
    flat["edges"] = [e for e in flat["edges"] if e["target"] == "c1"]
    # Without a regulator-to-regulator edge the view is what it always was: no labels.
    plain = Genome.from_dict(flat).sequence_view()
    assert "=R[" not in plain and "R[C:gate(hidden=3)]" in plain


def test_regulatory_depth_counts_the_regulators_of_the_longest_chain():
    doc = cascade_doc()
    assert Genome.from_dict(doc).regulatory_depth() == 3  # r1 -> r2 -> r3
    doc["edges"] = [e for e in doc["edges"] if e["source"] != "r2"]
    assert Genome.from_dict(doc).regulatory_depth() == 2  # r1 -> r2, r1 -> r3
    doc["edges"] = [e for e in doc["edges"] if e["target"] == "c1"]
    assert Genome.from_dict(doc).regulatory_depth() == 1
    doc["regions"] = [r for r in doc["regions"] if r["type"] != "regulatory"]
    doc["edges"] = []
    assert Genome.from_dict(doc).regulatory_depth() == 0


def test_evolve_genome_show_prints_the_hierarchy(tmp_path, capsys):
    from dogma_evolve.evolution.cli.main import main

    path = tmp_path / "cascade.yaml"
    genome = Genome.from_dict(cascade_doc())
    path.write_text(genome.to_yaml())
    assert main(["genome", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "r1=R[C:gate(hidden=3)]" in out and "r1>r2:activates r2>r3:represses" in out
    assert main(["genome", "show", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["genome_id"] == genome.id and shown["sequence"] == genome.sequence_view()
