"""A plugin's kinds are drawn only by runs that enable them: a seeded run without plugins
draws what it drew before plugins existed, whatever else the process has imported.

What keeps the draws: the built-ins register first (`import genome`), in `BUILT_IN` order;
the operators and the random genomes draw from `genome.kinds.drawable(enabled)`, which
leaves out every registered kind the run did not enable; the surrogate's features have a
column per built-in kind and a plugin kind's only where a genome holds it.
"""

from __future__ import annotations

import hashlib
import random

import pytest

from dogma_evolve.evolution.spaces.contract import Discard
from dogma_evolve.evolution.spaces.dogma import guards
from dogma_evolve.evolution.spaces.dogma.features import dogma_features
from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
from dogma_evolve.genome import KINDS, Genome
from dogma_evolve.genome.kinds import BUILT_IN, drawable
from dogma_evolve.phenotype.contract import genome_doc
from tests.phenotype.plugin_helpers import loaded_plugin

PINNED = {"vocab": 32, "max_len": 24}
# sha256 of the ids `draws` gives with the built-ins alone, computed by the code before
# plugin kinds existed (main at fc014bf): a change here changes every seeded search
BEFORE_PLUGINS = "08ae11b84b47c452"
# the operators of that code; one added since (`implicit_positions`) draws after them in
# `draws` and is left out of the pinned digest, which it would change by existing
PINNED_OPERATORS = (
    "base_deletion",
    "base_insertion",
    "kind_substitution",
    "point_substitution",
    "promoter_change",
    "region_duplication",
    "regulatory_cascade",
    "regulatory_rewiring",
    "structural_change",
)


def draws(space: DogmaSpace, pinned_only: bool = False) -> list[str]:
    """Seeded generation 0, samples, and 12 children of every operator (the pinned ones
    first, in order; the later ones unless ``pinned_only``) and of crossover."""
    ids = [g.id for g in space.initial(16, random.Random(7))]
    ids += [space.sample(random.Random(100 + k)).id for k in range(8)]
    parents = space.initial(8, random.Random(8))
    rng = random.Random(9)
    later = [] if pinned_only else sorted(set(space.operators) - set(PINNED_OPERATORS))
    for op in [*PINNED_OPERATORS, "x", *later]:
        for k in range(12):
            try:
                if op == "x":
                    child = space.crossover(parents[k % 8], parents[(k + 3) % 8], rng)
                else:
                    child = space.mutate(parents[k % 8], op, rng)
                ids.append(child.genome.id)
            except Discard:
                ids.append("discard")
    return ids


def digest(ids: list[str]) -> str:
    return hashlib.sha256(" ".join(ids).encode()).hexdigest()[:16]


def test_a_plugin_loaded_but_not_enabled_leaves_a_seeded_search_as_it_was():
    plain = DogmaSpace(PINNED, 24, 400_000)
    before = draws(plain)
    assert digest(draws(plain, pinned_only=True)) == BEFORE_PLUGINS
    genome = plain.initial(4, random.Random(7))[-1]
    features = dogma_features(genome, 24)
    with loaded_plugin("gated_deltanet") as record:
        assert record["kinds"] == ["gated_deltanet"] and list(KINDS)[-1] == "gated_deltanet"
        assert list(KINDS)[: len(BUILT_IN)] == list(BUILT_IN)  # the plugin comes after
        assert drawable() == list(BUILT_IN)
        assert draws(DogmaSpace(PINNED, 24, 400_000)) == before
        assert dogma_features(genome, 24) == features  # no new surrogate column

        enabled = DogmaSpace(PINNED, 24, 400_000, enabled=("gated_deltanet",))
        assert drawable(enabled.enabled) == [*BUILT_IN, "gated_deltanet"]
        with_plugin = draws(enabled)
        assert with_plugin != before
        drawn = [g for g in enabled.initial(64, random.Random(3))]
        assert any(b.gene.kind == "gated_deltanet" for g in drawn for r in g.regions for b in r.bases)


@pytest.mark.parametrize("op", ["base_insertion", "kind_substitution"])
def test_the_operators_insert_and_substitute_an_enabled_plugin_kind(op):
    with loaded_plugin("gated_deltanet"):
        space = DogmaSpace(PINNED, 24, 400_000, enabled=("gated_deltanet",))
        parents = space.initial(8, random.Random(8))
        rng = random.Random(op)
        made = []
        for k in range(200):
            try:
                child = space.mutate(parents[k % 8], op, rng)
            except Discard:
                continue
            if child.change["after"] in ("gated_deltanet", "T:gated_deltanet"):
                made.append(child)
        assert made, f"{op} never drew the plugin kind"
        for child in made:  # valid genomes, decodable (its block is registered)
            assert Genome.from_yaml(child.genome.to_yaml()).id == child.genome.id
            assert space.cost_metrics(child.genome)["params"] > 0


def test_a_plugin_kind_is_a_sequence_mixer_of_the_family_it_states():
    doc = genome_doc([{"base": "T", "kind": "gated_deltanet"}, {"base": "A", "kind": "swiglu"}])
    with loaded_plugin("gated_deltanet"):
        assert guards.is_sequence_mixer("gated_deltanet")
        assert guards.family("gated_deltanet") == "linear_attention"  # as its KindSpec states
        assert guards.prefilter(Genome.from_dict(doc)) is None  # its only mixer counts
    assert not guards.is_sequence_mixer("gated_deltanet")  # unknown once unloaded
