"""Variation operators: every child is a valid genome with a record of what changed."""

from __future__ import annotations

import copy
import random

import pytest

from dogma_evolve.evolution.spaces.contract import Discard
from dogma_evolve.evolution.spaces.dogma.operators import MUTATIONS, vary
from dogma_evolve.evolution.spaces.dogma.repair import repair
from dogma_evolve.evolution.spaces.dogma.seeds import initial_population, random_genome, scale_down
from dogma_evolve.genome import PRESETS, Genome
from dogma_evolve.phenotype import account

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


# -- regulatory hierarchies ------------------------------------------------------------------
def _gate_region(rid: str) -> dict:
    gate = {"base": "C", "kind": "gate", "params": {"hidden": 4}}
    return {"id": rid, "type": "regulatory", "bases": [gate]}


def _regulated(extra_regulator: bool = False) -> Genome:
    regions = [
        {"id": "s0", "type": "structural", "settings": {"d_model": 32, **PINNED}},
        _gate_region("r1"),
        {"id": "c1", "type": "coding", "bases": [{"base": "A", "kind": "swiglu"}]},
        {"id": "p2", "type": "promoter", "settings": {"copies": 2}},
        {"id": "c2", "type": "coding", "bases": [{"base": "T", "kind": "attention", "params": {"heads": 2}}]},
    ]
    if extra_regulator:
        regions.insert(2, _gate_region("r2"))
    edges = [{"source": "r1", "target": "c2", "kind": "activates"}]
    return Genome.from_dict({"regions": regions, "edges": edges})


def _regulatory_edges(g: Genome) -> set[tuple[str, str, str]]:
    return {(e.source, e.target, e.kind) for e in g.edges if e.kind in ("activates", "represses")}


def test_regulatory_cascade_connects_inserts_heads_and_rewires():
    parent = _regulated(extra_regulator=True)
    seen: set[str] = set()
    for seed in range(40):
        # no repair: the operator itself must leave a valid genome
        child = vary("regulatory_cascade", [parent], random.Random(seed), lambda d: d).genome
        before, after = _regulatory_edges(parent), _regulatory_edges(child)
        new_regions = {r.id for r in child.regions} - {r.id for r in parent.regions}
        types = {r.id: r.type for r in child.regions}
        if not new_regions and len(after) == len(before) + 1:  # connect: two regulators joined
            (s, t, _), *_ = after - before
            assert types[s] == types[t] == "regulatory"
            seen.add("connect")
        elif not new_regions:  # rewire: one end of one edge moved
            assert len(after) == len(before) and len(after - before) == 1 == len(before - after)
            (old,), (new,) = before - after, after - before
            assert old[2] == new[2] and (old[0] == new[0]) != (old[1] == new[1])
            seen.add("rewire")
        else:
            (rid,) = new_regions
            assert types[rid] == "regulatory" and child.region(rid).bases[0].gene.kind == "gate"
            if ("r1", "c2", "activates") not in after:  # insert: r1 -> c2 became r1 -> rid -> c2
                assert {("r1", rid, "activates"), (rid, "c2", "activates")} <= after
                order = [r.id for r in child.regions]
                assert order.index("r1") < order.index(rid) < order.index("p2")  # not inside p2 + c2
                seen.add("insert")
            else:  # head: a new regulator on top of r1 or r2
                [(s, t, _)] = after - before
                assert s == rid and t in ("r1", "r2")
                seen.add("head")
        assert child.regulatory_depth() >= 1
    assert seen == {"connect", "insert", "head", "rewire"}


def test_repeated_cascade_growth_builds_multi_level_hierarchies():
    """From a genome without a regulator, the operator alone grows hierarchies three and
    more regulators deep; every step is a valid genome, priced as the built model."""
    from dogma_evolve.phenotype import decode

    genome = Genome.from_dict(
        {
            "regions": [
                {"id": "s0", "type": "structural", "settings": {"d_model": 32, **PINNED}},
                {"id": "c1", "type": "coding", "bases": [{"base": "A", "kind": "swiglu"}]},
            ]
        }
    )
    assert genome.regulatory_depth() == 0
    rng, depths = random.Random(7), []
    for _ in range(25):
        genome = vary("regulatory_cascade", [genome], rng, lambda d: d).genome  # valid unrepaired
        depths.append(genome.regulatory_depth())
    assert depths[0] == 1 and max(depths) >= 3, depths
    assert account(genome).params == decode(genome, "meta").num_params()


def test_repair_drops_an_edge_into_a_regulator_that_lost_its_signal():
    doc = _regulated(extra_regulator=True).to_dict()
    doc["edges"].append({"source": "r1", "target": "r2", "kind": "represses"})
    assert Genome.from_dict(repair(copy.deepcopy(doc), PINNED)).regulatory_depth() == 2
    doc["regions"][2]["bases"] = [{"base": "C", "kind": "allosteric", "params": {}}]  # r2: no gate left
    repaired = Genome.from_dict(repair(doc, PINNED))
    assert ("r1", "r2", "represses") not in _regulatory_edges(repaired)
    assert ("r1", "c2", "activates") in _regulatory_edges(repaired)


def test_implicit_positions_drops_the_scheme_and_puts_an_order_mixer_first():
    """The coupled move: positions none and one order-carrying mixer before every region;
    the parent's regions follow unchanged, every kind of `ORDER_MIXERS` is drawn, and a
    model that already takes its order from its first mixer is left alone."""
    from dogma_evolve.evolution.spaces.dogma import guards
    from dogma_evolve.evolution.spaces.dogma.operators import ORDER_MIXERS

    fix = lambda d: repair(d, PINNED)  # noqa: E731
    learned = {"positions": "learned", "d_model": 32, **PINNED}
    attention = {"base": "T", "kind": "attention", "params": {"heads": 2}}
    parent = Genome.from_dict(
        {
            "regions": [
                {"id": "s0", "type": "structural", "settings": learned},
                {
                    "id": "c1",
                    "type": "coding",
                    "bases": [attention, {"base": "A", "kind": "mlp", "params": {}}],
                },
            ],
            "edges": [],
        }
    )
    drawn = set()
    for k in range(40):
        child = vary("implicit_positions", [parent], random.Random(k), fix).genome
        doc = child.to_dict()
        assert child.structural["positions"] == "none"
        first = guards.mixers_of_doc(doc)[0]
        assert first.kind in ORDER_MIXERS and first.region_index == 1
        assert doc["regions"][1]["bases"] == [
            b for b in doc["regions"][1]["bases"] if b["kind"] == first.kind
        ]
        assert [r["bases"] for r in doc["regions"][2:]] == [
            r["bases"] for r in parent.to_dict()["regions"][1:]
        ]
        drawn.add(first.kind)
    assert drawn == set(ORDER_MIXERS)
    done = vary("implicit_positions", [parent], random.Random(0), fix).genome
    with pytest.raises(Discard, match="already takes its order"):
        vary("implicit_positions", [done], random.Random(0), fix)
    # without positions but attention first, the move still puts an order mixer in front
    unordered = Genome.from_dict(
        {
            **parent.to_dict(),
            "regions": [
                {"id": "s0", "type": "structural", "settings": {**learned, "positions": "none"}},
                *parent.to_dict()["regions"][1:],
            ],
        }
    )
    child = vary("implicit_positions", [unordered], random.Random(1), fix).genome
    assert guards.mixers_of_doc(child.to_dict())[0].kind in ORDER_MIXERS
