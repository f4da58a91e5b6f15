"""Variation operators: every child is a valid genome with a record of what changed."""

from __future__ import annotations

import random

import pytest

from evolution.operators import MUTATIONS, Discard, vary
from evolution.repair import repair
from evolution.seeds import initial_population, random_genome, scale_down
from genome import PRESETS, Genome
from phenotype import account

PINNED = {"vocab": 32, "max_len": 24}


@pytest.fixture(scope="module")
def parents() -> list[Genome]:
    return initial_population(12, random.Random(0), PINNED, max_params=400_000)


@pytest.mark.parametrize("op", sorted(MUTATIONS) + ["homologous_crossover"])
def test_operator_children_are_valid_and_recorded(op, parents):
    rng = random.Random(op)
    made = 0
    for k in range(40):
        mates = [parents[k % len(parents)], parents[(3 * k + 1) % len(parents)]]
        try:
            child = vary(op, mates, rng, lambda d: repair(d, PINNED))
        except Discard as e:
            assert str(e)  # a discard always carries its reason
            continue
        made += 1
        assert Genome.from_yaml(child.genome.to_yaml()).id == child.genome.id
        assert child.genome.id != mates[0].id
        assert child.op == op and child.change["op"] == op
        assert {"location", "before", "after"} <= set(child.change)
        assert child.genome.structural["vocab"] == PINNED["vocab"]
    assert made >= 10, f"{op} produced only {made} valid children in 40 tries"


def test_point_substitution_changes_exactly_what_it_records(parents):
    rng = random.Random(5)
    child = vary("point_substitution", [parents[0]], rng, lambda d: repair(d, PINNED))
    region_id, index, name = child.change["location"].split("/")
    kind, param = name.split(".")
    region = child.genome.region(region_id)
    assert region.bases[int(index)].gene.kind == kind
    assert region.bases[int(index)].gene.get(param) == child.change["after"]
    before = parents[0].region(region_id).bases[int(index)].gene.get(param)
    assert before == child.change["before"]


def test_region_duplication_can_share_weights(parents):
    rng = random.Random(1)
    shared = [vary("region_duplication", [p], rng, lambda d: repair(d, PINNED)) for p in parents]
    with_share = [c for c in shared if "(shares)" in str(c.change["after"])]
    assert with_share, "no duplication added a shares edge"
    g = with_share[0].genome
    edge = next(e for e in g.edges if e.kind == "shares")
    assert g.region(edge.source).bases == g.region(edge.target).bases
    # Shared weights count once: the duplicate adds no parameters.
    base_params = account(Genome(g.regions, tuple(e for e in g.edges if e.kind != "shares")))
    assert account(g).params < base_params.params


def test_seeds_include_scaled_presets_and_respect_the_budget():
    pop = initial_population(16, random.Random(3), PINNED, max_params=300_000)
    assert len(pop) == 16
    assert all(account(g).params <= 300_000 for g in pop)
    kinds = {b.gene.kind for g in pop for r in g.regions for b in r.bases}
    assert {"attention", "mamba"} <= kinds
    gpt2 = Genome.from_dict(scale_down(PRESETS["gpt2-small"](), 64, 2, PINNED))
    assert gpt2.structural["positions"] == "learned" and gpt2.structural["d_model"] == 64
    assert gpt2 in pop


def test_random_genomes_are_reproducible():
    a = random_genome(random.Random(11), PINNED, 500_000)
    b = random_genome(random.Random(11), PINNED, 500_000)
    assert a.id == b.id
