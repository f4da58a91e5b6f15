"""`evolve blame ID`: for every region and base of an individual's genome, the ancestor
that gave it its current form and the operator (with its change record) that did it,
like `git blame` for genomes.

The walk starts at the individual and, for each region (and each base of it), follows the
parent the region came from: the only parent of a mutation (regions keep the operator's
labels: where the engine's canonical renaming moved one, ``change["labels"]`` maps it back), or
for a crossover the parent the change record names (`homologous_crossover`:
`"location": "a[:2] + b[1:]"` with the child's region ids in `"after"`; NAS-Bench-201's
`node_crossover`: `"after": ["a", "b", "a"]`, one parent per node). As long as the
region, or base, is equal in the parent, the walk goes on; the first individual where it
differs from its parent, or has no counterpart there, is the one it is attributed to. A
region or base unchanged back to a seed (or an immigrant: no parents) is the seed's, with
operator null.

What "equal" compares:

* a DOGMA region: its type, settings, bases and the edges into it (sources mapped to the
  parent's region ids), so a region entry names whoever last changed anything in it;
* a DOGMA base: its type, kind and every param in canonical form (derived params
  resolved, so a width change that re-derives a base's hidden size changes the base).
  Bases are followed by index, shifted past a `base_insertion` or `base_deletion` at the
  location its change record gives;
* a NAS-Bench-201 cell: each of its six edges is a region (`edge0:0->1`, as the
  operators' change records name them) whose form is its operation; cells have no bases.

The units are the space's own (`SearchSpace.units`: `DogmaSpace.units`, `NB201Space.units`),
read in the space of the individual's run. `blame` is a pure function over `Origin` records;
`blame_individual` reads them from a store.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dogma_evolve.evolution.spaces.contract import Unit as Region

if TYPE_CHECKING:
    from dogma_evolve.store import IndividualRecord, Store

_CUTS = re.compile(r"a\[:(\d+)\] \+ b\[(\d+):\]")
_BASE_AT = re.compile(r"(?P<region>[^/]+)/(?P<index>\d+)")


@dataclass(frozen=True)
class Origin:
    """What blame needs of one individual: who it is, how it was made, its regions."""

    id: int
    generation: int
    operator: str | None
    change: dict[str, Any] | None
    parents: tuple[int, ...]
    regions: tuple[Region, ...]

    def region(self, region_id: str) -> Region | None:
        return next((r for r in self.regions if r.id == region_id), None)


def regions_of(yaml_text: str, space: str = "dogma") -> tuple[Region, ...]:
    """The units of a stored genome of ``space``, as that space defines them."""
    from dogma_evolve.evolution.spaces.registry import SPACES

    return SPACES[space].units(yaml_text)


def space_of(store: Store, record: IndividualRecord) -> str:
    """The search space of the run ``record`` was born in (its config's ``space``)."""
    run = store.get_run(record.run_id)
    return str(run.config.get("space", "dogma")) if run is not None else "dogma"


def origin_of(record: IndividualRecord, space: str = "dogma") -> Origin:
    return Origin(
        id=record.id,
        generation=record.generation,
        operator=record.operator,
        change=record.change if isinstance(record.change, dict) else None,
        parents=tuple(record.parents),
        regions=regions_of(record.yaml, space),
    )


# -- where a region came from --------------------------------------------------------------
def _source(child: Origin, region_id: str, parents: Mapping[int, Origin]) -> tuple[Origin, str] | None:
    """The parent and the parent's region id that ``region_id`` of ``child`` came from
    (None when it is new in ``child`` or the parent is not known)."""
    if not child.parents:
        return None
    change = child.change or {}
    after = change.get("after")
    region_id = _operator_label(child, region_id)
    if len(child.parents) > 1 or child.operator in ("homologous_crossover", "node_crossover"):
        return _crossover_source(child, region_id, change, after, parents)
    parent = parents.get(child.parents[0])
    if parent is None or parent.region(region_id) is None:
        return None
    return parent, region_id


def _crossover_source(
    child: Origin, region_id: str, change: dict[str, Any], after: Any, parents: Mapping[int, Origin]
) -> tuple[Origin, str] | None:
    def parent_at(index: int) -> Origin | None:  # a crossover of a parent with itself has one edge
        return parents.get(child.parents[min(index, len(child.parents) - 1)])

    if not isinstance(after, list):
        return None
    cuts = _CUTS.fullmatch(str(change.get("location", "")))
    if cuts is not None:  # DOGMA: the child's regions were a[:cut_a] + b[cut_b:] (then repaired)
        if region_id not in after:
            return None
        position, cut_a, cut_b = after.index(region_id), int(cuts[1]), int(cuts[2])
        which, index = (0, position) if position < cut_a else (1, cut_b + position - cut_a)
        parent = parent_at(which)
        if parent is None or index >= len(parent.regions):
            return None
        return parent, parent.regions[index].id
    edge = re.fullmatch(r"edge\d+:\d+->(\d+)", region_id)
    if edge is not None and len(after) == 3:  # a cell: each node's edges from one parent
        parent = parent_at(0 if after[int(edge[1]) - 1] == "a" else 1)
        return None if parent is None or parent.region(region_id) is None else (parent, region_id)
    return None


def _operator_label(child: Origin, region_id: str) -> str:
    """The label the operator gave region ``region_id`` of ``child``: the engine renames a
    child's regions by position (`evolution.spaces.dogma.identity.canonical`) and records
    the renaming as ``change["labels"]`` (canonical id -> operator's label) when it moved
    one; the change record and the parent speak the operator's labels."""
    labels = (child.change or {}).get("labels")
    return str(labels.get(region_id, region_id)) if isinstance(labels, dict) else region_id


def _parent_base(child: Origin, region_id: str, index: int) -> int | None:
    """The index in the parent's region of base ``index`` (None: the base is new here)."""
    change = child.change or {}
    at = _BASE_AT.fullmatch(str(change.get("location", "")))
    if at is None or at["region"] != _operator_label(child, region_id):
        return index
    changed = int(at["index"])
    if child.operator == "base_insertion":
        return None if index == changed else index - (index > changed)
    if child.operator == "base_deletion":
        return index + (index >= changed)
    return index


def _same_region(child: Region, parent: Region, child_origin: Origin, parents: Mapping[int, Origin]) -> bool:
    if child.form != parent.form or child.bases != parent.bases:
        return False
    mapped = []
    for kind, source in child.edges_in:
        found = _source(child_origin, source, parents)
        mapped.append((kind, found[1] if found else None))
    return sorted(mapped, key=str) == sorted(parent.edges_in, key=str)


# -- the walk ------------------------------------------------------------------------------
def _attribute(start: Origin, region_id: str, base: int | None, origins: Mapping[int, Origin]) -> Origin:
    """The nearest individual, from ``start`` back, where the region (or its base) took
    its current form."""
    current, rid, index = start, region_id, base
    seen = {start.id}
    while True:
        found = _source(current, rid, origins)
        if found is None:
            return current
        parent, parent_rid = found
        mine, theirs = current.region(rid), parent.region(parent_rid)
        if mine is None or theirs is None:
            return current
        if index is None:
            if not _same_region(mine, theirs, current, origins):
                return current
            parent_index = None
        else:
            parent_index = _parent_base(current, rid, index)
            if parent_index is None or parent_index >= len(theirs.bases):
                return current
            if mine.bases[index] != theirs.bases[parent_index]:
                return current
        if parent.id in seen:  # a cycle in damaged data: stop where we are
            return current
        seen.add(parent.id)
        current, rid, index = parent, parent_rid, parent_index


def blame(individual_id: int, origins: Mapping[int, Origin]) -> list[dict[str, Any]]:
    """One entry per region (``base`` None) and per base of it (``base`` its index in the
    region), in genome order: the region, the base, and the individual, generation,
    operator and change that gave it its current form. ``origins`` holds the individual and
    its ancestors by id (missing ones end the walk there)."""
    me = origins[individual_id]
    entries = []
    for region in me.regions:
        for base in (None, *range(len(region.bases))):
            who = _attribute(me, region.id, base, origins)
            entries.append(
                {
                    "region": region.id,
                    "base": base,
                    "individual": who.id,
                    "generation": who.generation,
                    "operator": who.operator,
                    "change": who.change,
                }
            )
    return entries


def blame_individual(store: Store, record: IndividualRecord) -> dict[str, Any]:
    """`evolve blame`'s document: ``{"individual": id, "entries": [...]}`` (see `blame`)."""
    space = space_of(store, record)
    ancestors = [step.individual_id for step in store.ancestry(record.id)]
    origins = {r.id: origin_of(r, space) for r in store.individuals_by_id(ancestors)}
    origins[record.id] = origin_of(record, space)
    return {"individual": record.id, "entries": blame(record.id, origins)}


def labels(record: IndividualRecord, space: str = "dogma") -> dict[tuple[str, int | None], str]:
    """What each entry is, for people: a region's type, a base's `T:attention`."""
    out: dict[tuple[str, int | None], str] = {}
    for region in regions_of(record.yaml, space):
        out[(region.id, None)] = region.type if region.type != "edge" else str(region.form)
        for index in range(len(region.bases)):
            out[(region.id, index)] = region.base_label(index)
    return out
