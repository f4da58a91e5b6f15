"""Genome ids are stored everywhere (the store, exports, caches): they must not move.

These ids were computed before the kind specs moved into one place per kind; a refactoring
of the schema, its defaults or its derivations that changes any of them changes what an
existing genome means. An intended change of the canonical form updates this table and
says so in its commit.

Genome format 2 (`genome.formats`) renamed two kinds and moved no id: the documents below
were written in format 1 and say so (`dogma: 1`); their format-2 spellings give the same ids.
The `dogma` preset's TetraMemory became the volumetric mesh with format 2, a new architecture
and so a new id; its format-1 genome (the fixed-reach `tetra`) keeps the old one.
"""

from __future__ import annotations

import pytest

from dogma_evolve.genome import PRESETS, Genome, preset

PRESET_IDS = {
    # was 407d012b… (DOGMA_FORMAT_1_ID) until its TetraMemory became the mesh (format 2)
    "dogma": "839a8258cacbc84fc1478c02126c057275ce35e741e4023747a99b3763d016ca",
    "dogma-byte": "aa7dd857293f734bcfec86c82b7750be386ccec69ca8df7d0614b44fc1f84f85",  # added with it
    "gpt2-small": "b188620881f68dddc8344ccde79b8ac193e7d095a71a7785f8022e6f8d3ad955",
    "griffin": "c5a47bfb00abb5147115b5619fdaf6402196255e97d5fcaccfcd78247dbad9ed",
    "jamba": "1fb5fbb53d85988924ca10c72bd7ef5aabeb7f856ec9a0594cde069e0b462245",
    "llama3-8b": "1022852d85f4556fd8cb4ff6d115667f2680fcc2835d7e8bbb2ed1317b44f4e0",
    "mamba-130m": "62f1d33d846c5111fc99af6a5f722305492a389e7f5224e15871caec544d65b9",
    "mistral-7b": "124d010eb537239b848af3a89a3435365d6990750bbc7502d2e3e423b8c1c5d7",
    "mixtral-8x7b": "eaa662542b0bd3d04ccc5ea7517d15aa0fbc1526f8fd377a2545550ddcdb82cb",
    "rwkv4-169m": "266d8244445ca8ffc7e20a3b65a0857475ccdcb8103d37ee7256764e68cfe965",
}

# Every kind that existed when the ids were pinned, each on its first legal base type with
# every param left to its default or derivation: pins all defaults and derivations at once.
CODING = (
    ("T", "attention"),
    ("T", "conv"),
    ("T", "dna"),
    ("A", "epigenetic"),
    ("G", "expression"),
    ("A", "geglu"),
    ("T", "gru"),
    ("T", "linear_attention"),
    ("T", "lstm"),
    ("T", "mamba"),
    ("T", "mamba2"),
    ("T", "mla"),
    ("A", "mlp"),
    ("A", "moe"),
    ("T", "retention"),
    ("T", "rglru"),
    ("T", "rwkv"),
    ("A", "rwkv_channel"),
    ("T", "s4"),
    ("T", "strand_attention"),
    ("A", "swiglu"),
    ("A", "tetra"),
)
REGULATORY = ("allosteric", "gate")
ALL_KINDS_ID = "0817911be18b753299374d32f8371911f9dc937e28cd6f4154a9f5a043a198f6"
FORMAT_2_NAMES = {"tetra": "tetra_reach"}  # format 1's name -> format 2's, where they differ
DOGMA_FORMAT_1_ID = "407d012b95f17bdc45faa8437552f03259b9bc0bcd68b1fbed9da06abb119d9d"


def test_every_preset_is_pinned():
    assert set(PRESET_IDS) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESET_IDS))
def test_preset_id_is_unchanged(name):
    assert preset(name).id == PRESET_IDS[name]


def _all_kinds(version: int) -> dict:
    names = {} if version == 1 else FORMAT_2_NAMES
    return {
        "dogma": version,
        "regions": [
            {"id": "s0", "type": "structural", "settings": {"d_model": 64, "vocab": 97}},
            {"id": "r0", "type": "regulatory", "bases": [{"base": "C", "kind": k} for k in REGULATORY]},
            {
                "id": "c1",
                "type": "coding",
                "bases": [{"base": b, "kind": names.get(k, k)} for b, k in CODING],
            },
        ],
        "edges": [{"source": "r0", "target": "c1", "kind": "activates"}],
    }


@pytest.mark.parametrize("version", [1, 2])
def test_defaults_and_derivations_of_every_kind_are_unchanged(version):
    assert Genome.from_dict(_all_kinds(version)).id == ALL_KINDS_ID


def test_the_format_1_dogma_preset_keeps_its_id():
    """The `dogma` preset as it was written before format 2: its fixed-reach TetraMemory."""
    doc = PRESETS["dogma"]()
    [tetra] = [b for r in doc["regions"] for b in r.get("bases", ()) if b["kind"] == "tetra"]
    tetra["params"] = {"window": 2, "stride": 8, "levels": 2}
    assert Genome.from_dict({**doc, "dogma": 1}).id == DOGMA_FORMAT_1_ID
    tetra["kind"] = "tetra_reach"
    assert Genome.from_dict(doc).id == DOGMA_FORMAT_1_ID
