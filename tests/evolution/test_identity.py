"""Phenotype identity: genomes that build one model share one id, are born and trained once.

`evolution.spaces.dogma.identity.canonical` renames region labels by position and drops
no-op promoters; the engine canonicalises every birth, never a stored genome.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

from dogma_evolve.evaluation import EvalRequest, EvalResult
from dogma_evolve.evolution.engine import Engine, RunConfig
from dogma_evolve.evolution.spaces.dogma.identity import canonical, relabelling
from dogma_evolve.evolution.spaces.dogma.space import DogmaSpace
from dogma_evolve.evolution.spaces.nb201 import NB201Space
from dogma_evolve.genome import Genome
from dogma_evolve.phenotype import decode
from dogma_evolve.store import Store

CONFIG = RunConfig(population=4, generations=1, steps=3, seed=5, max_params=60_000, confirm=1)  # 1 seed
PINNED = DogmaSpace.from_config(CONFIG).pinned


def _structural(d_model: int) -> dict[str, Any]:
    return {"d_model": d_model, **PINNED}


def _doc(ids: tuple[str, str, str, str], promoter: str | None = None, d_model: int = 32) -> dict[str, Any]:
    """s | regulatory gate | coding (attention + swiglu) | coding (mamba), the gate
    activating both coding regions, a loop between them: edges name three of the regions."""
    s, r, a, b = ids
    regions: list[dict[str, Any]] = [
        {"id": s, "type": "structural", "settings": _structural(d_model)},
        {"id": r, "type": "regulatory", "bases": [{"base": "C", "kind": "gate", "params": {}}]},
        {
            "id": a,
            "type": "coding",
            "bases": [
                {"base": "T", "kind": "attention", "params": {"heads": 2}},
                {"base": "A", "kind": "swiglu", "params": {}},
            ],
        },
        {"id": b, "type": "coding", "bases": [{"base": "T", "kind": "mamba", "params": {}}]},
    ]
    if promoter is not None:  # a no-op promoter (every setting its default) before `b`
        regions.insert(3, {"id": promoter, "type": "promoter", "settings": {"copies": 1}})
    edges = [
        {"source": r, "target": a, "kind": "activates"},
        {"source": r, "target": b, "kind": "represses"},
        {"source": a, "target": b, "kind": "loop"},
    ]
    return {"dogma": 2, "regions": regions, "edges": edges}


PLAIN = Genome.from_dict(_doc(("s0", "r1", "c2", "c3")))
RENAMED = Genome.from_dict(_doc(("body", "regulator", "first", "second")))
PROMOTED = Genome.from_dict(_doc(("s0", "r1", "c2", "c3"), promoter="pz"))


def _outputs(genome: Genome) -> tuple[int, torch.Tensor]:
    """(parameter count, logits on fixed tokens) of the phenotype built under seed 0."""
    torch.manual_seed(0)
    model = decode(genome)
    model.eval()
    ids = torch.randint(0, PINNED["vocab"], (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return sum(p.numel() for p in model.parameters()), model(ids)


def test_label_renamed_and_noop_promoter_twins_share_one_canonical_id() -> None:
    ids = {PLAIN.id, RENAMED.id, PROMOTED.id}
    assert len(ids) == 3  # three spellings, three raw ids (what the search paid for before)
    assert {canonical(g).id for g in (PLAIN, RENAMED, PROMOTED)} == {canonical(PLAIN).id}
    twin = canonical(RENAMED)
    assert [r.type for r in twin.regions] == [r.type for r in RENAMED.regions]  # order kept
    assert [r.id for r in twin.regions] == ["s0", "r1", "c2", "c3"]
    assert [(e.source, e.target, e.kind) for e in twin.edges] == [
        ("r1", "c2", "activates"),
        ("r1", "c3", "represses"),
        ("c2", "c3", "loop"),
    ]
    assert canonical(twin) is twin  # idempotent
    _, labels = relabelling(RENAMED)
    assert labels == {"s0": "body", "r1": "regulator", "c2": "first", "c3": "second"}


def test_a_promoter_that_changes_expression_is_kept_and_numbered_with_its_region() -> None:
    doc = _doc(("s", "r", "a", "b"), promoter="pz")
    doc["regions"][3]["settings"] = {"copies": 2}
    genome = canonical(Genome.from_dict(doc))
    assert [r.id for r in genome.regions] == ["s0", "r1", "c2", "p3", "c3"]
    assert canonical(genome).id == genome.id != canonical(PLAIN).id


@pytest.mark.parametrize("twin", [RENAMED, PROMOTED], ids=["renamed", "noop-promoter"])
def test_twins_build_identical_models(twin: Genome) -> None:
    params, logits = _outputs(PLAIN)
    twin_params, twin_logits = _outputs(twin)
    canon_params, canon_logits = _outputs(canonical(twin))
    assert params == twin_params == canon_params > 0
    assert torch.equal(logits, twin_logits) and torch.equal(logits, canon_logits)


@pytest.mark.parametrize("name", ["gpt2-small", "llama3-8b", "mamba-130m", "griffin", "dogma"])
def test_presets_are_written_in_the_canonical_scheme(name: str) -> None:
    from dogma_evolve.genome import preset

    genome = preset(name)
    assert canonical(genome) is genome  # their ids (and every stored result of them) stay


def test_nb201_cells_are_their_own_canonical_form() -> None:
    import random

    space = NB201Space()
    cell = space.sample(random.Random(0))
    assert space.canonical(cell) is cell and space.prefilter(cell) is None


class FakePool:
    """Answers every request in this process with a made-up score (from the genome id) and
    remembers the requests: the engine's pool protocol, no training."""

    def __init__(self) -> None:
        self.requests: list[EvalRequest] = []

    def evaluate(
        self, requests: Sequence[EvalRequest], on_result: Callable[[EvalResult], None] | None = None
    ) -> list[EvalResult]:
        out = []
        for request in requests:
            self.requests.append(request)
            score = int(hashlib.sha256(request.genome_id.encode()).hexdigest()[:6], 16) / 0xFFFFFF
            result = EvalResult.for_request(request, "ok", metrics={"accuracy": score, "quality": score})
            out.append(result)
            if on_result:
                on_result(result)
        return out


def _others() -> list[Genome]:
    """Three more distinct (canonical) genomes with a sequence mixer."""
    return [canonical(Genome.from_dict(_doc(("s", "r", "a", "b"), d_model=d))) for d in (16, 24, 40)]


@pytest.fixture
def store(tmp_path: Any) -> Any:
    with Store(f"sqlite:///{tmp_path / 'evolve.db'}") as s:
        yield s


def test_an_engine_run_births_and_trains_twins_once(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = [PLAIN, RENAMED, PROMOTED, *_others()]
    monkeypatch.setattr(DogmaSpace, "initial", lambda self, size, rng: list(seeds))
    pool = FakePool()
    engine = Engine(CONFIG, store, pool)
    engine.run()
    first = [i for i in store.individuals(engine.run_id) if i.generation == 0]
    canon = canonical(PLAIN).id
    assert sorted(i.genome_id for i in first) == sorted({canon, *(g.id for g in _others())})
    requested = [r.genome_id for r in pool.requests]
    assert requested.count(canon) == 1  # the three spellings: one model, trained once
    assert RENAMED.id not in requested and PROMOTED.id not in requested
    assert len(requested) == len(set(requested)) == engine.spent
    born = [i.genome_id for i in store.individuals(engine.run_id)]
    assert len(born) == len(set(born))
    for i in store.individuals(engine.run_id):  # every birth is in canonical form
        assert canonical(Genome.from_yaml(i.yaml)).id == i.genome_id


def test_resume_keeps_the_id_of_a_stored_non_canonical_genome(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeds = [RENAMED, *_others()]
    with monkeypatch.context() as m:  # a run stored before canonical forms: RENAMED as it is
        m.setattr(DogmaSpace, "initial", lambda self, size, rng: list(seeds))
        m.setattr(DogmaSpace, "canonical", lambda self, genome: genome)
        first = Engine(RunConfig(**{**CONFIG.to_dict(), "generations": 0}), store, FakePool())
        first.run()
    assert RENAMED.id in {i.genome_id for i in store.individuals(first.run_id)}
    pool = FakePool()
    resumed = Engine.resume(first.run_id, store, pool, generations=1)
    population = resumed._load_population()
    assert RENAMED.id in {i.genome.id for i in population}  # parse keeps the stored id
    assert DogmaSpace.from_config(CONFIG).parse(RENAMED.to_yaml()).id == RENAMED.id
    resumed.run()
    stored = {i.genome_id for i in store.individuals(first.run_id) if i.generation == 0}
    assert RENAMED.id in stored and canonical(RENAMED).id not in stored
    assert canonical(RENAMED).id in resumed.seen  # its canonical twin is never born again
    later = [i.genome_id for i in store.individuals(first.run_id) if i.generation > 0]
    assert later and canonical(RENAMED).id not in later
    assert canonical(RENAMED).id not in {r.genome_id for r in pool.requests}


def test_a_mutation_that_only_respells_its_parent_is_discarded() -> None:
    import random

    from dogma_evolve.evolution.spaces.contract import Discard

    space = DogmaSpace.from_config(CONFIG)
    parent = canonical(PLAIN)
    made = 0
    for seed in range(40):
        try:
            child = space.mutate(parent, "promoter_change", random.Random(seed))
        except Discard:
            continue
        made += 1
        assert isinstance(child.genome, Genome)
        assert child.genome.id == canonical(child.genome).id != parent.id
        labels = child.change.get("labels", {})
        assert all(new != old for new, old in labels.items())
    assert made
