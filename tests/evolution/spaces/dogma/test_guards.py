"""Variation that keeps what works: the sequence-mixer guards and the ordered steps."""

from __future__ import annotations

import random

import pytest

from dogma_evolve.evolution.spaces.contract import Discard
from dogma_evolve.evolution.spaces.dogma import guards
from dogma_evolve.evolution.spaces.dogma.operators import MUTATIONS, base_deletion, promoter_change, vary
from dogma_evolve.evolution.spaces.dogma.repair import repair
from dogma_evolve.evolution.spaces.dogma.seeds import SEED_PRESETS, SEED_WIDTHS, scale_down
from dogma_evolve.genome import KINDS, PRESETS, PROMOTER, Genome
from dogma_evolve.phenotype import account
from dogma_evolve.phenotype.registry import REGISTRY

PINNED = {"vocab": 32, "max_len": 24}


def fix(doc: dict) -> dict:
    return repair(doc, PINNED)


@pytest.fixture(scope="module")
def seeds() -> list[Genome]:
    """The presets as the search seeds them: two widths and depths each."""
    return [
        Genome.from_dict(scale_down(PRESETS[name](), d, copies, PINNED))
        for name in SEED_PRESETS
        for d, copies in ((64, 2), (32, 1))
    ]


def _genome(*coding: list[dict], promoters: dict[int, dict] | None = None) -> Genome:
    regions: list[dict] = [{"id": "s0", "type": "structural", "settings": {"d_model": 32, **PINNED}}]
    for k, bases in enumerate(coding):
        if promoters and k in promoters:
            regions.append({"id": f"p{k}", "type": "promoter", "settings": promoters[k]})
        regions.append({"id": f"c{k}", "type": "coding", "bases": bases})
    return Genome.from_dict({"regions": regions, "edges": []})


DEFAULT_PROMOTER = {name: spec.default for name, spec in PROMOTER.items()}


def parent_ids(g: Genome) -> set[str]:
    return {r.id for r in g.regions}


ATTENTION = {"base": "T", "kind": "attention", "params": {"heads": 2}}
MLP = {"base": "A", "kind": "mlp", "params": {}}


# -- the tables ---------------------------------------------------------------------------
def test_sequence_mixers_are_the_blocks_with_the_sequence_role():
    assert {k for k, b in REGISTRY.items() if b.role == "sequence"} == guards.SEQUENCE_MIXERS
    assert guards.check_kinds() == [] and set(guards.FAMILY) == set(KINDS)
    for kind in KINDS:  # a family never mixes mixers with per-token blocks
        members = {k for k in KINDS if guards.family(k) == guards.family(kind)}
        assert len({k in guards.SEQUENCE_MIXERS for k in members}) == 1, guards.family(kind)
    assert guards.family("attention") == guards.family("mla") != guards.family("mamba")


def test_degenerate_mixers_mix_nothing():
    assert not guards.mixes_positions("attention", {"window": 1, "global_every": 0})
    assert guards.mixes_positions("attention", {"window": 1, "global_every": 2}, copies=2)
    assert not guards.mixes_positions("attention", {"window": 1, "global_every": 2}, copies=1)
    assert guards.mixes_positions("attention", {"window": 2, "global_every": 0})
    assert not guards.mixes_positions("strand_attention", {"window": 1})
    assert not guards.mixes_positions("conv", {"kernel": 1}) and guards.mixes_positions("conv", {"kernel": 2})
    assert not guards.mixes_positions("mlp", {}) and not guards.mixes_positions("rwkv_channel", {})


def test_expressed_mixers_follow_the_promoters(seeds):
    for g in seeds:
        assert guards.expressed_mixers(g) and guards.prefilter(g) is None
    g = _genome([ATTENTION, MLP], [MLP])
    assert [(m.region, m.base, m.kind) for m in guards.expressed_mixers(g)] == [("c0", 0, "attention")]
    silenced = _genome([ATTENTION], [MLP], promoters={0: {"expressed": False}})
    assert guards.expressed_mixers(silenced) == []
    assert "no expressed sequence mixer (attention silenced" in str(guards.prefilter(silenced))
    assert guards.expressed_mixers(_genome([ATTENTION], [MLP], promoters={0: {"strength": 0.0}})) == []
    assert "no expressed sequence mixer:" in str(guards.prefilter(_genome([MLP])))
    nothing = _genome([ATTENTION], promoters={0: {"expressed": False}})
    assert "no expressed coding region" in str(guards.prefilter(nothing))
    self_only = _genome([{**ATTENTION, "params": {"heads": 2, "window": 1}}, MLP])
    assert guards.prefilter(self_only) is not None


# -- no child loses its last mixer ---------------------------------------------------------
def test_no_mutation_of_a_seed_loses_its_expressed_mixers(seeds):
    made = 0
    for op in sorted(MUTATIONS):
        for k, parent in enumerate(seeds):
            for n in range(6):
                try:
                    child = vary(op, [parent], random.Random(f"{op}/{k}/{n}"), fix)
                except Discard as e:
                    assert str(e)
                    continue
                made += 1
                assert guards.expressed_mixers(child.genome), (op, child.change)
                assert guards.prefilter(child.genome) is None
    assert made > 250


def test_vary_discards_a_child_without_the_mixer_its_parent_had():
    parent, child = _genome([ATTENTION, MLP]).to_dict(), _genome([MLP]).to_dict()
    with pytest.raises(Discard, match="no expressed sequence mixer"):
        guards.check_child("base_deletion", [parent], child)
    guards.check_child("base_deletion", [child], child)  # a parent without one may have such a child
    gone = _genome([ATTENTION], promoters={0: {"expressed": False}}).to_dict()
    with pytest.raises(Discard, match="no coding region"):
        guards.check_child("promoter_change", [parent], gone)


def test_base_deletion_never_removes_the_last_mixer(seeds):
    gpt2 = seeds[0]
    removed = set()
    for k in range(200):
        variation = base_deletion(gpt2.to_dict(), random.Random(k))
        assert guards.mixers_of_doc(variation.child)
        removed.add(variation.change["before"])
    assert removed == {"A:mlp"}
    spread = _genome([MLP, MLP], [ATTENTION, MLP])
    gone = {base_deletion(spread.to_dict(), random.Random(k)).change["location"] for k in range(60)}
    assert gone == {"c0/0", "c0/1", "c1/1"}  # never c1/0, the attention
    # with two mixers either may go
    two = _genome([ATTENTION, {**ATTENTION, "params": {"heads": 4}}])
    assert {base_deletion(two.to_dict(), random.Random(k)).change["location"] for k in range(40)} == {
        "c0/0",
        "c0/1",
    }


def test_promoter_change_never_silences_the_last_mixer_region_nor_is_a_no_op(seeds):
    parents = [*seeds, _genome([ATTENTION, MLP], [MLP]), _genome([MLP], [ATTENTION]), _genome([ATTENTION])]
    parents.append(_genome([ATTENTION], [MLP], promoters={1: {"expressed": False}}))
    made = 0
    for k, parent in enumerate(parents):
        for n in range(25):
            try:
                child = vary("promoter_change", [parent], random.Random(f"{k}/{n}"), fix).genome
            except Discard as e:
                assert str(e)
                continue
            made += 1
            assert guards.expressed_mixers(child)
            assert guards.expressed_view(child.to_dict()) != guards.expressed_view(parent.to_dict())
            new = [r for r in child.regions if r.type == "promoter" and r.id not in parent_ids(parent)]
            assert all(r.settings_dict != DEFAULT_PROMOTER for r in new)  # no P[x1]
    assert made >= 150
    # a silenced region can only be expressed again: its copies decode to nothing
    silenced = _genome([ATTENTION], [MLP], promoters={1: {"expressed": False}})
    for n in range(20):
        variation = promoter_change(silenced.to_dict(), random.Random(n))
        assert variation.change["location"] in ("c0.copies", "c0.strength", "c1.expressed")


# -- ordered steps -------------------------------------------------------------------------
def test_window_moves_between_global_and_real_windows(seeds):
    assert guards.window_values(24) == (0, 16, 8, 4, 2)
    assert guards.window_values(2048) == (0, 1024, 512, 256, 128)
    rng = random.Random(0)
    for before, allowed in ((0, {16}), (16, {0, 8}), (2, {4}), (3, {4, 2}), (4096, {16})):
        got = {guards.step_window({"window": before}, {"max_len": 24}, rng) for _ in range(30)}
        assert got == allowed, before
    params = {"window": 16, "global_every": 2}
    while guards.step_window(params, {"max_len": 24}, rng) != 0:
        pass
    assert params["global_every"] == 0  # global needs no interleave
    seen = 0
    for k in range(400):
        try:
            child = vary("point_substitution", [seeds[k % 4]], random.Random(k), fix)
        except Discard:
            continue
        if str(child.change["location"]).endswith("attention.window"):
            seen += 1
            assert child.change["after"] in guards.window_values(24) and child.change["after"] != 1
    assert seen >= 5


def test_d_model_moves_through_the_seed_widths_and_positions_to_a_related_scheme(seeds):
    widths = sorted(SEED_WIDTHS)
    moved = {"s.d_model": 0, "s.positions": 0}
    for k in range(240):
        parent = seeds[k % len(seeds)]
        try:
            child = vary("structural_change", [parent], random.Random(k), fix)
        except Discard:
            continue
        where, before, after = child.change["location"], child.change["before"], child.change["after"]
        if where == "s.d_model":
            moved[where] += 1
            assert after in widths and abs(widths.index(after) - widths.index(before)) == 1
            assert child.genome.structural["d_model"] == after
            mlps = [b.gene for r in child.genome.regions for b in r.bases if b.gene.kind == "mlp"]
            assert all(g.get("hidden") == 4 * after for g in mlps)  # resized, not just relabelled
        elif where == "s.positions":
            moved[where] += 1
            assert after in guards.POSITION_NEIGHBOURS[before]
    assert min(moved.values()) >= 5, moved


def test_kind_substitution_stays_in_family_most_of_the_time(seeds):
    inside = total = 0
    for k in range(600):
        parent = seeds[k % len(seeds)]
        try:
            child = vary("kind_substitution", [parent], random.Random(k), fix)
        except Discard:
            continue
        total += 1
        inside += guards.family(child.change["before"]) == guards.family(child.change["after"])
    # 0.8 by construction, plus the out-of-family draws that land in the family anyway
    assert total >= 450 and 0.78 <= inside / total <= 0.95, (inside, total)


def test_operators_are_deterministic_given_their_rng(seeds):
    for op in [*sorted(MUTATIONS), "homologous_crossover"]:
        for k in range(3):
            runs = []
            for _ in range(2):
                try:
                    runs.append(vary(op, [seeds[k], seeds[k + 2]], random.Random(k), fix).genome.id)
                except Discard as e:
                    runs.append(str(e))
            assert runs[0] == runs[1], op


# -- crossover -----------------------------------------------------------------------------
def test_crossover_of_presets_keeps_a_mixer_and_the_parents_size_range(seeds):
    """Every child of two seeds keeps an expressed mixer and lies within [0.5 x the smaller
    parent, 1.5 x the larger] in parameters (a random cut of independent regions made
    x0.01 to x13 of the first parent)."""
    made, recombined = 0, 0
    for i, a in enumerate(seeds):
        for j, b in enumerate(seeds):
            if i == j:
                continue
            pa, pb = account(a).params, account(b).params
            for k in range(4):
                try:
                    child = vary("homologous_crossover", [a, b], random.Random(f"{i}/{j}/{k}"), fix).genome
                except Discard as e:
                    assert str(e)
                    continue
                made += 1
                assert guards.expressed_mixers(child)
                assert 0.5 * min(pa, pb) <= account(child).params <= 1.5 * max(pa, pb)
                kinds = {bs.gene.kind for r in child.regions for bs in r.bases}
                recombined += bool(kinds - {bs.gene.kind for r in a.regions for bs in r.bases})
    assert made >= 80 and recombined >= 10
