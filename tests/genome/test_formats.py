"""Genome document formats (`genome.formats`): format 1's `tetra` is the fixed-reach
TetraMemory, format 2's the volumetric mesh. Stored format-1 genomes reopen as the genomes
they were, with their ids and their exact stored text; format-2 documents read with the new
names; the canonical YAML stays format 1."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from dogma_evolve.genome import KINDS, Genome, GenomeError
from dogma_evolve.genome.formats import CANONICAL_FORMAT, FORMAT, FORMATS, kind_named, name_of

RELEASE_0_1 = Path(__file__).parents[1] / "store" / "fixtures" / "release_0_1.db"

# Stored by dogma-evolve 0.1.0 (tests/store/fixtures/release_0_1.db), byte for byte.
STORED_ID = "3f73b4ec205a0121e90a8d80ac78ecfc137fd8225bf4f0cc800bdd80a32c7408"
STORED_YAML = """\
dogma: 1
edges:
- kind: represses
  source: r0
  target: c0
regions:
- id: s0
  settings:
    bias: false
    d_model: 32
    max_len: 15
    norm: rmsnorm
    norm_eps: 1.0e-05
    norm_position: pre
    positions: learned
    rope_theta: 10000.0
    tie_embeddings: true
    vocab: 29
  type: structural
- bases:
  - base: C
    kind: gate
    params:
      hidden: 16
  id: r0
  type: regulatory
- id: p0
  settings:
    copies: 1
    expressed: true
    strength: 1.0
  type: promoter
- bases:
  - base: T
    kind: tetra
    params:
      levels: 2
      rounds: 2
      stride: 4
      window: 2
  - base: T
    kind: conv
    params:
      kernel: 4
  - base: T
    kind: rglru
    params:
      d_conv: 4
      heads: 4
      width: 32
  id: c0
  type: coding
"""
FIXED_REACH = {"levels": 2, "rounds": 2, "stride": 4, "window": 2}


def one_gene(kind: str, params: dict | None = None, version: int | None = None) -> dict:
    doc: dict = {
        "regions": [
            {"id": "s0", "type": "structural", "settings": {"d_model": 32, "vocab": 40, "max_len": 64}},
            {"id": "c1", "type": "coding", "bases": [{"base": "A", "kind": kind, "params": params or {}}]},
        ]
    }
    return doc if version is None else {"dogma": version, **doc}


def gene(genome: Genome):
    return genome.regions[-1].bases[0].gene


def test_a_stored_format_1_tetra_reopens_as_the_fixed_reach_kind_with_its_id_and_text():
    g = Genome.from_yaml(STORED_YAML)
    assert g.id == STORED_ID
    assert g.to_yaml() == STORED_YAML  # the store refuses a known id with another text
    tetra = g.region("c0").bases[0].gene
    assert tetra.kind == "tetra_reach" and tetra.as_dict == FIXED_REACH
    assert "T:tetra_reach" in g.sequence_view()
    current = g.to_dict()
    assert current["dogma"] == FORMAT == 2 and current["regions"][3]["bases"][0]["kind"] == "tetra_reach"
    assert Genome.from_dict(current) == g and Genome.from_dict(current).id == STORED_ID


def test_every_genome_of_the_0_1_store_reopens_with_its_id_and_its_stored_text(tmp_path):
    db = tmp_path / "release_0_1.db"
    shutil.copy(RELEASE_0_1, db)  # never opened in place
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT id, yaml FROM genomes").fetchall()
    assert len(rows) == 8 and sum("kind: tetra\n" in text for _, text in rows) == 3
    for genome_id, text in rows:
        g = Genome.from_yaml(text)
        assert (g.id, g.to_yaml()) == (genome_id, text)


def test_format_2_tetra_is_the_mesh_and_its_canonical_text_is_format_1():
    g = Genome.from_dict(one_gene("tetra"))
    assert gene(g).kind == "tetra" and set(gene(g).as_dict) == {"neighbours", "scales", "reach"}
    assert g.to_yaml().startswith(f"dogma: {CANONICAL_FORMAT}\n") and "kind: tetra_mesh\n" in g.to_yaml()
    assert g.to_dict()["regions"][1]["bases"][0]["kind"] == "tetra"
    assert Genome.from_yaml(g.to_yaml()) == g and Genome.from_dict(g.to_dict()) == g
    assert Genome.from_dict(one_gene("tetra", version=2)) == g
    assert "A:tetra" in g.sequence_view() and "tetra_mesh" not in g.sequence_view()


def test_tetra_mesh_is_the_mesh_in_both_formats_with_its_old_id():
    mesh = Genome.from_dict(one_gene("tetra"))
    for version in (None, 1, 2):
        alias = Genome.from_dict(one_gene("tetra_mesh", {"neighbours": 8}, version))
        assert alias == mesh and alias.id == mesh.id


def test_tetra_reach_names_the_fixed_reach_kind_in_both_formats():
    old = Genome.from_dict(one_gene("tetra", FIXED_REACH, version=1))
    assert gene(old).kind == "tetra_reach"
    for version in (None, 1, 2):
        assert Genome.from_dict(one_gene("tetra_reach", FIXED_REACH, version)).id == old.id
    assert Genome.from_dict(one_gene("tetra", version=1)) == Genome.from_dict(one_gene("tetra_reach"))


def test_fixed_reach_params_under_the_new_tetra_say_what_to_write():
    with pytest.raises(GenomeError, match="unknown field 'levels'.*`tetra_reach`.*`dogma: 1`") as e:
        Genome.from_dict(one_gene("tetra", FIXED_REACH))
    assert "\n" not in str(e.value)
    with pytest.raises(GenomeError, match="unknown field 'levels'$"):
        Genome.from_dict(one_gene("tetra_mesh", FIXED_REACH))  # the alias is no old document


@pytest.mark.parametrize("version", [0, 3, True, "2", 1.5, None])
def test_unknown_formats_are_refused(version):
    with pytest.raises(GenomeError, match="unsupported genome format version"):
        Genome.from_dict({**one_gene("mlp"), "dogma": version})


def test_every_kind_is_written_under_a_name_that_reads_back_to_it():
    assert FORMATS == (1, 2)
    for version in FORMATS:
        names = [name_of(kind, version) for kind in KINDS]
        assert len(set(names)) == len(names)
        assert [kind_named(name, version) for name in names] == list(KINDS)
    assert name_of("tetra", 1) == "tetra_mesh" and name_of("tetra_reach", 1) == "tetra"
