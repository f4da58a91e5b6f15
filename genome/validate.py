"""Turning an untrusted document into a valid `Genome`, or a one-line `GenomeError`.

Rules:
- exactly one structural region, first; every promoter is followed by a coding region;
- every base names a known kind that is legal on its base type and in its region type;
  regulatory regions hold C bases only;
- hyperparameters are known, typed (an integer is an integer), inside sanity bounds, and
  consistent with the structural settings (heads divide the width, ...);
- edges join existing regions; `activates`/`represses` run from a regulatory region to a
  later coding region, or to a later regulatory region that emits a signal (one with a
  `gate` base): a regulatory hierarchy, where one regulator gates another's signal;
  `loop` joins two coding regions forwards; `shares` joins two coding regions with
  identical genes (so the weights fit) and a target shares from one source;
  every edge points downstream, so no edge set can form a cycle: the genome's region order
  is a topological order of its regulatory graph, and the order the phenotype runs in.

Kind names are read in the document's format (`dogma: 1` or `2`, 2 when absent;
`genome.formats`): in format 1 `tetra` is the fixed-reach TetraMemory (`tetra_reach`).

Params written as 0 ("derive") are resolved against the structural settings by the kind's
own `KindSpec.derive` (`genome.kinds`), so that two spellings of one architecture have one
canonical form and one id; cross-field checks run there too.
"""

from __future__ import annotations

import re
from typing import Any

from dogma_evolve.genome.core import Base, Edge, Gene, Genome, Region
from dogma_evolve.genome.errors import GenomeError
from dogma_evolve.genome.formats import FORMAT, FORMATS, kind_named
from dogma_evolve.genome.schema import (
    BASE_TYPES,
    EDGE_KINDS,
    KINDS,
    MAX_LAYERS,
    PROMOTER,
    REGION_TYPES,
    STRUCTURAL,
    ParamSpec,
    fill,
)

SIGNAL_KIND = "gate"  # the regulatory kind whose outputs make up a region's signal
_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$")


def _mapping(value: Any, what: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise GenomeError(f"{what} must be a mapping, got {type(value).__name__}")
    unknown = [k for k in value if k not in allowed]
    if unknown:
        raise GenomeError(f"{what}: unknown field {str(unknown[0])!r:.60}")
    return value


def _settings(raw: Any, specs: dict[str, ParamSpec], what: str) -> tuple[tuple[str, Any], ...]:
    raw = {} if raw is None else _mapping(raw, what, set(specs))
    try:
        return tuple(sorted(fill(specs, raw).items()))
    except ValueError as e:
        raise GenomeError(f"{what}: {e}") from None


def _base(raw: Any, where: str, region_type: str, version: int) -> Base:
    raw = _mapping(raw, where, {"base", "kind", "params"})
    btype, name = raw.get("base"), raw.get("kind")
    if btype not in BASE_TYPES:
        raise GenomeError(f"{where}: unknown base type {btype!r:.20} (expected A, T, C or G)")
    kind = kind_named(name, version) if isinstance(name, str) else None
    if kind is None or kind not in KINDS:
        raise GenomeError(f"{where}: unknown kind {name!r:.40}")
    spec = KINDS[kind]
    if btype not in spec.bases:
        raise GenomeError(
            f"{where}: kind {kind!r} is not allowed on a {btype} base (allowed: {', '.join(spec.bases)})"
        )
    if region_type not in spec.regions:
        raise GenomeError(f"{where}: kind {kind!r} cannot live in a {region_type} region")
    try:
        params = _settings(raw.get("params"), spec.params, f"{where} {kind}")
    except GenomeError as e:
        if name == "tetra" and version != 1 and "unknown field" in str(e):
            raise GenomeError(
                f"{e} (`tetra` is the volumetric mesh since genome format 2: the fixed-reach "
                "TetraMemory is `tetra_reach`, or mark a format-1 document `dogma: 1`)"
            ) from None
        raise
    return Base(btype, Gene(kind, params))


def parse_document(doc: Any) -> Genome:
    """Validate a plain-data genome document; return the canonical `Genome`."""
    doc = _mapping(doc, "genome", {"dogma", "regions", "edges"})
    version = doc.get("dogma", FORMAT)
    if isinstance(version, bool) or version not in FORMATS:
        raise GenomeError(f"unsupported genome format version {doc.get('dogma')!r:.20}")
    version = int(version)  # 1.0 reads as 1, as it always has
    raw_regions = doc.get("regions")
    if not isinstance(raw_regions, list) or not raw_regions:
        raise GenomeError("genome needs a non-empty list of regions")
    if len(raw_regions) > MAX_LAYERS:
        raise GenomeError(f"too many regions ({len(raw_regions)} > {MAX_LAYERS})")

    regions: list[Region] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_regions):
        raw = _mapping(raw, f"region {i}", {"id", "type", "settings", "bases"})
        rid, rtype = raw.get("id"), raw.get("type")
        if not isinstance(rid, str) or not _ID.match(rid):
            raise GenomeError(f"region {i}: id must match {_ID.pattern}, got {rid!r:.40}")
        if rid in seen:
            raise GenomeError(f"region {rid}: duplicate region id")
        seen.add(rid)
        if rtype not in REGION_TYPES:
            raise GenomeError(f"region {rid}: unknown region type {rtype!r:.40}")
        where = f"region {rid}"
        if rtype in ("structural", "promoter"):
            if "bases" in raw:
                raise GenomeError(f"{where}: a {rtype} region has settings, not bases")
            specs = STRUCTURAL if rtype == "structural" else PROMOTER
            regions.append(Region(rid, rtype, settings=_settings(raw.get("settings"), specs, where)))
            continue
        if "settings" in raw:
            raise GenomeError(f"{where}: a {rtype} region has bases, not settings")
        raw_bases = raw.get("bases")
        if not isinstance(raw_bases, list) or not raw_bases:
            raise GenomeError(f"{where}: needs a non-empty list of bases")
        bases = tuple(_base(b, f"{where} base {j}", rtype, version) for j, b in enumerate(raw_bases))
        if rtype == "regulatory" and any(b.type != "C" for b in bases):
            raise GenomeError(f"{where}: a regulatory region holds C bases only")
        regions.append(Region(rid, rtype, bases=bases))

    if regions[0].type != "structural" or sum(r.type == "structural" for r in regions) != 1:
        raise GenomeError("a genome has exactly one structural region, and it comes first")
    structural = regions[0].settings_dict
    for prev, cur in zip(regions, [*regions[1:], None], strict=True):
        if prev.type == "promoter" and (cur is None or cur.type != "coding"):
            raise GenomeError(f"region {prev.id}: a promoter must be followed by a coding region")

    layers = 0
    for k, r in enumerate(regions):
        before = regions[k - 1] if k else None
        copies = before.settings_dict["copies"] if before is not None and before.type == "promoter" else 1
        layers += copies * len(r.bases)
        derived: list[Base] = []
        for j, b in enumerate(r.bases):
            try:
                params = KINDS[b.gene.kind].derive(b.gene.as_dict, structural)
            except ValueError as e:
                raise GenomeError(f"region {r.id} base {j} {b.gene.kind}: {e}") from None
            derived.append(Base(b.type, Gene(b.gene.kind, tuple(sorted(params.items())))))
        regions[k] = Region(r.id, r.type, tuple(derived), r.settings)
    if layers > MAX_LAYERS:
        raise GenomeError(f"genome expresses {layers} layers (at most {MAX_LAYERS})")

    edges = _edges(doc.get("edges") or [], regions)
    return Genome(tuple(regions), edges)


def emits_signal(region: Region) -> bool:
    """Whether a regulatory region emits a signal that another regulator can gate: it
    holds a `gate` base (an allosteric-only region sends none)."""
    return any(b.gene.kind == SIGNAL_KIND for b in region.bases)


def _edges(raw_edges: Any, regions: list[Region]) -> tuple[Edge, ...]:
    if not isinstance(raw_edges, list):
        raise GenomeError("edges must be a list")
    by_id = {r.id: (i, r) for i, r in enumerate(regions)}
    edges: list[Edge] = []
    pairs: set[tuple[str, str]] = set()
    share_targets: set[str] = set()
    for k, raw in enumerate(raw_edges):
        raw = _mapping(raw, f"edge {k}", {"source", "target", "kind"})
        src, dst, kind = raw.get("source"), raw.get("target"), raw.get("kind")
        where = f"edge {k} ({src!s:.40} -> {dst!s:.40})"
        if kind not in EDGE_KINDS:
            raise GenomeError(f"{where}: unknown edge kind {kind!r:.40}")
        for end in (src, dst):
            if not isinstance(end, str) or end not in by_id:
                raise GenomeError(f"{where}: no region {end!r:.40}")
        assert isinstance(src, str) and isinstance(dst, str) and isinstance(kind, str)  # checked above
        if (src, dst) in pairs:
            raise GenomeError(f"{where}: duplicate edge between the same regions")
        pairs.add((src, dst))
        (i, rs), (j, rt) = by_id[src], by_id[dst]
        if kind in ("activates", "represses"):
            if rs.type != "regulatory" or rt.type not in ("coding", "regulatory"):
                raise GenomeError(f"{where}: {kind} runs from a regulatory to a coding or regulatory region")
            if rt.type == "regulatory" and not emits_signal(rt):
                raise GenomeError(
                    f"{where}: {kind} targets regulatory region {dst}, which emits no signal (no gate base)"
                )
        elif rs.type != "coding" or rt.type != "coding":
            raise GenomeError(f"{where}: {kind} joins two coding regions")
        if i >= j:
            raise GenomeError(f"{where}: {kind} must point downstream (later in the genome)")
        if kind == "shares":
            if rs.bases != rt.bases:
                raise GenomeError(f"{where}: shares needs identical genes in both regions")
            if dst in share_targets:
                raise GenomeError(f"{where}: region {dst} already shares another's weights")
            share_targets.add(dst)
        edges.append(Edge(src, dst, kind))
    for e in edges:
        if e.kind == "shares" and e.source in share_targets:
            raise GenomeError(
                f"edge ({e.source} -> {e.target}): shares from a region that "
                "itself shares weights; point at the original"
            )
    return tuple(edges)
