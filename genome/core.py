"""The DOGMA genome as data: genes on typed bases, typed regions, a regulatory graph.

A genome is immutable. Its canonical form is a plain dict with every default filled in,
so two genomes that build the same model have the same canonical YAML and the same id
(sha256 of that YAML). Construct genomes through `Genome.from_dict` / `from_yaml`, which
validate; the dataclasses themselves do no checking.

Documents come in formats (`genome.formats`): `to_dict` writes the current one (format 2,
the names of `KINDS`), the canonical YAML stays in format 1, so that every id and every
stored text stays what it was.

The regulatory graph is `regions` (nodes, in order) and `edges`. Validation makes every
edge point downstream, so the region order is a topological order of that graph (no cycle
can form) and the order the phenotype runs in: nothing needs a graph library.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from dogma_evolve.genome.formats import CANONICAL_FORMAT, FORMAT, name_of


@dataclass(frozen=True)
class Gene:
    """A block kind and its hyperparameters (all of them, defaults filled in)."""

    kind: str
    params: tuple[tuple[str, Any], ...]

    def get(self, name: str) -> Any:
        return dict(self.params)[name]

    @property
    def as_dict(self) -> dict[str, Any]:
        return dict(self.params)


@dataclass(frozen=True)
class Base:
    """A typed unit of the architecture: `type` is one of A, T, C, G."""

    type: str
    gene: Gene


@dataclass(frozen=True)
class Region:
    """Consecutive bases of one region type.

    `settings` holds the structural settings (structural regions) or the expression
    settings (promoter regions); `bases` holds the bases of coding and regulatory regions.
    """

    id: str
    type: str
    bases: tuple[Base, ...] = ()
    settings: tuple[tuple[str, Any], ...] = ()

    @property
    def settings_dict(self) -> dict[str, Any]:
        return dict(self.settings)


@dataclass(frozen=True)
class Edge:
    """A regulatory edge between two regions: activates, represses, shares or loop.

    `activates`/`represses` run from a regulatory region to a later coding region, or to a
    later regulatory region whose signal it then gates (a regulatory hierarchy)."""

    source: str
    target: str
    kind: str


@dataclass(frozen=True)
class Genome:
    regions: tuple[Region, ...]
    edges: tuple[Edge, ...] = field(default=())

    # -- views ---------------------------------------------------------------------------
    def to_dict(self, version: int = FORMAT) -> dict[str, Any]:
        """The document in format `version` (default: the current one, whose kind names are
        those of `KINDS`); every default filled in, so it reads back to this genome."""
        regions = []
        for r in self.regions:
            doc: dict[str, Any] = {"id": r.id, "type": r.type}
            if r.type in ("structural", "promoter"):
                doc["settings"] = dict(r.settings)
            else:
                doc["bases"] = [
                    {"base": b.type, "kind": name_of(b.gene.kind, version), "params": dict(b.gene.params)}
                    for b in r.bases
                ]
            regions.append(doc)
        return {
            "dogma": version,
            "regions": regions,
            "edges": [{"source": e.source, "target": e.target, "kind": e.kind} for e in self.edges],
        }

    def to_yaml(self) -> str:
        """The canonical YAML (what is hashed, stored and exported): the format-1 document."""
        from dogma_evolve.genome.yaml_io import dump_yaml

        return dump_yaml(self.to_dict(CANONICAL_FORMAT))

    @cached_property
    def id(self) -> str:
        """sha256 hex of the canonical YAML: the genome's id everywhere."""
        return hashlib.sha256(self.to_yaml().encode()).hexdigest()

    @classmethod
    def from_dict(cls, doc: Any) -> Genome:
        from dogma_evolve.genome.validate import parse_document

        return parse_document(doc)

    @classmethod
    def from_yaml(cls, text: str | bytes) -> Genome:
        from dogma_evolve.genome.yaml_io import load_yaml

        return cls.from_dict(load_yaml(text))

    def sequence_view(self) -> str:
        from dogma_evolve.genome.sequence import sequence_view

        return sequence_view(self)

    # -- structure -----------------------------------------------------------------------
    @property
    def structural(self) -> dict[str, Any]:
        return self.regions[0].settings_dict

    def region(self, region_id: str) -> Region:
        for r in self.regions:
            if r.id == region_id:
                return r
        raise KeyError(region_id)

    def promoter_of(self, region_id: str) -> dict[str, Any]:
        """Expression settings that apply to a coding region (defaults when no promoter)."""
        from dogma_evolve.genome.schema import PROMOTER

        out = {k: s.default for k, s in PROMOTER.items()}
        for prev, cur in zip(self.regions, self.regions[1:], strict=False):
            if cur.id == region_id and prev.type == "promoter":
                out.update(prev.settings_dict)
        return out

    def regulatory_depth(self) -> int:
        """Regulators on the longest chain of `activates`/`represses` edges between
        regulatory regions: 0 without a regulatory region, 1 when no regulator regulates
        another, 3 for r1 -> r2 -> r3. Region order is topological (edges point downstream),
        so one pass in order suffices."""
        regulatory = {r.id for r in self.regions if r.type == "regulatory"}
        depth = dict.fromkeys(regulatory, 1)
        for r in self.regions:  # every source is settled before its targets
            for e in self.edges:
                if e.target == r.id and e.source in regulatory and r.id in regulatory:
                    depth[r.id] = max(depth[r.id], depth[e.source] + 1)
        return max(depth.values(), default=0)

    def replace(
        self, regions: tuple[Region, ...] | None = None, edges: tuple[Edge, ...] | None = None
    ) -> Genome:
        """A new genome with regions and/or edges replaced, validated."""
        g = Genome(
            self.regions if regions is None else tuple(regions), self.edges if edges is None else tuple(edges)
        )
        return Genome.from_dict(g.to_dict())
