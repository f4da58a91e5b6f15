"""Turning an untrusted document into a valid `Genome`, or a one-line `GenomeError`.

Rules (DESIGN.md §2):
- exactly one structural region, first; every promoter is followed by a coding region;
- every base names a known kind that is legal on its base type and in its region type;
  regulatory regions hold C bases only;
- hyperparameters are known, typed (an integer is an integer), inside sanity bounds, and
  consistent with the structural settings (heads divide the width, ...);
- edges join existing regions; `activates`/`represses` run from a regulatory region to a
  later coding region; `loop` joins two coding regions forwards; `shares` joins two coding
  regions with identical genes (so the weights fit) and a target shares from one source;
  every edge points downstream, so no edge set can form a cycle.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from genome.core import Base, Edge, Gene, Genome, Region
from genome.errors import GenomeError
from genome.schema import (
    BASE_TYPES,
    EDGE_KINDS,
    KINDS,
    MAX_LAYERS,
    PROMOTER,
    REGION_TYPES,
    STRUCTURAL,
    ParamSpec,
)

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
    out = {}
    for name, spec in specs.items():
        try:
            out[name] = spec.check(name, raw[name]) if name in raw else spec.default
        except ValueError as e:
            raise GenomeError(f"{what}: {e}") from None
    return tuple(sorted(out.items()))


def _base(raw: Any, where: str, region_type: str) -> Base:
    raw = _mapping(raw, where, {"base", "kind", "params"})
    btype, kind = raw.get("base"), raw.get("kind")
    if btype not in BASE_TYPES:
        raise GenomeError(f"{where}: unknown base type {btype!r:.20} (expected A, T, C or G)")
    if not isinstance(kind, str) or kind not in KINDS:
        raise GenomeError(f"{where}: unknown kind {kind!r:.40}")
    schema = KINDS[kind]
    if btype not in schema.bases:
        raise GenomeError(
            f"{where}: kind {kind!r} is not allowed on a {btype} base (allowed: {', '.join(schema.bases)})"
        )
    if region_type not in schema.regions:
        raise GenomeError(f"{where}: kind {kind!r} cannot live in a {region_type} region")
    params = _settings(raw.get("params"), schema.params, f"{where} {kind}")
    return Base(btype, Gene(kind, params))


def _resolve_attention(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    heads = p["heads"]
    if p["head_dim"] == 0:
        if s["d_model"] % heads:
            raise ValueError(f"heads={heads} does not divide d_model={s['d_model']}")
        p["head_dim"] = s["d_model"] // heads
    p["kv_heads"] = p["kv_heads"] or heads
    if heads % p["kv_heads"]:
        raise ValueError(f"kv_heads={p['kv_heads']} does not divide heads={heads}")
    if s["positions"] == "rope" and p["head_dim"] % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {p['head_dim']}")
    if p.get("global_every") and not p["window"]:
        raise ValueError("global_every interleaves local and global layers: it needs a window")
    return p


def _resolve_hidden(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    p["hidden"] = p["hidden"] or 4 * s["d_model"]
    return p


def _resolve_swiglu(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    p["hidden"] = p["hidden"] or 8 * ((8 * s["d_model"] // 3 + 7) // 8)
    return p


def _resolve_mamba(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    p["dt_rank"] = p["dt_rank"] or -(-s["d_model"] // 16)
    return p


def _resolve_mla(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    if p["head_dim"] == 0:
        if s["d_model"] % p["heads"]:
            raise ValueError(f"heads={p['heads']} does not divide d_model={s['d_model']}")
        p["head_dim"] = s["d_model"] // p["heads"]
    p["v_head_dim"] = p["v_head_dim"] or p["head_dim"]
    p["kv_rank"] = p["kv_rank"] or 4 * p["head_dim"]
    if p["rope_dim"] % 2:
        raise ValueError(f"rope_dim must be even, got {p['rope_dim']}")
    return p


def _resolve_moe(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    if p["top_k"] > p["experts"]:
        raise ValueError(f"top_k={p['top_k']} exceeds experts={p['experts']}")
    if not p["hidden"]:
        rule = _resolve_hidden if p["expert"] in ("gelu", "relu") else _resolve_swiglu
        p["hidden"] = rule({"hidden": 0}, s)["hidden"]
    return p


def _resolve_s4(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    if p["d_state"] % 2:
        raise ValueError(f"d_state must be even (complex-conjugate pairs), got {p['d_state']}")
    return p


def _resolve_width(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    p["hidden"] = p["hidden"] or s["d_model"]
    return p


def _heads_width(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    if p["head_dim"] == 0:
        if s["d_model"] % p["heads"]:
            raise ValueError(f"heads={p['heads']} does not divide d_model={s['d_model']}")
        p["head_dim"] = s["d_model"] // p["heads"]
    return p


def _resolve_retention(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    p = _heads_width(p, s)
    p["v_head_dim"] = p["v_head_dim"] or p["head_dim"]
    if p["head_dim"] % 2:
        raise ValueError(f"retention rotates keys: head_dim must be even, got {p['head_dim']}")
    return p


def _resolve_mamba2(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    inner = p["expand"] * s["d_model"]
    p["head_dim"] = p["head_dim"] or (64 if inner % 64 == 0 else inner)
    if inner % p["head_dim"]:
        raise ValueError(f"head_dim={p['head_dim']} does not divide expand*d_model={inner}")
    return p


def _resolve_rglru(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    p["width"] = p["width"] or s["d_model"]
    if p["width"] % p["heads"]:
        raise ValueError(f"heads={p['heads']} does not divide width={p['width']}")
    return p


def _resolve_dna(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    p["width"] = p["width"] or s["d_model"]
    return p


def _resolve_strand(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    return _resolve_attention(p, s)


def _resolve_tetra(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    if p["window"] + p["levels"] == 0:
        raise ValueError("a mesh node needs a neighbour: window or levels must be positive")
    if p["stride"] ** p["levels"] > 1 << 16:
        raise ValueError(f"stride^levels = {p['stride']}^{p['levels']} reaches too far back")
    return p


# Params written as 0 ("derive") are resolved against the structural settings, so that two
# spellings of one architecture have one canonical form and one id. Cross-field checks too.
RESOLVERS: dict[str, Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]] = {
    "attention": _resolve_attention,
    "mlp": _resolve_hidden,
    "swiglu": _resolve_swiglu,
    "mamba": _resolve_mamba,
    "mla": _resolve_mla,
    "geglu": _resolve_swiglu,
    "moe": _resolve_moe,
    "s4": _resolve_s4,
    "lstm": _resolve_width,
    "gru": _resolve_width,
    "mamba2": _resolve_mamba2,
    "rglru": _resolve_rglru,
    "linear_attention": _heads_width,
    "retention": _resolve_retention,
    "rwkv_channel": _resolve_hidden,
    "dna": _resolve_dna,
    "strand_attention": _resolve_strand,
    "expression": _resolve_hidden,
    "tetra": _resolve_tetra,
}


def parse_document(doc: Any) -> Genome:
    """Validate a plain-data genome document; return the canonical `Genome`."""
    doc = _mapping(doc, "genome", {"dogma", "regions", "edges"})
    if doc.get("dogma", 1) != 1:
        raise GenomeError(f"unsupported genome format version {doc.get('dogma')!r:.20}")
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
        bases = tuple(_base(b, f"{where} base {j}", rtype) for j, b in enumerate(raw_bases))
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
    for k, (prev, r) in enumerate(zip([None, *regions], regions, strict=False)):
        copies = prev.settings_dict["copies"] if prev is not None and prev.type == "promoter" else 1
        layers += copies * len(r.bases)
        bases = []
        for j, b in enumerate(r.bases):
            resolve = RESOLVERS.get(b.gene.kind)
            if resolve:
                try:
                    params = resolve(b.gene.as_dict, structural)
                except ValueError as e:
                    raise GenomeError(f"region {r.id} base {j} {b.gene.kind}: {e}") from None
                b = Base(b.type, Gene(b.gene.kind, tuple(sorted(params.items()))))
            bases.append(b)
        regions[k] = Region(r.id, r.type, tuple(bases), r.settings)
    if layers > MAX_LAYERS:
        raise GenomeError(f"genome expresses {layers} layers (at most {MAX_LAYERS})")

    edges = _edges(doc.get("edges") or [], regions)
    return Genome(tuple(regions), edges)


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
        if (src, dst) in pairs:
            raise GenomeError(f"{where}: duplicate edge between the same regions")
        pairs.add((src, dst))
        (i, rs), (j, rt) = by_id[src], by_id[dst]
        if kind in ("activates", "represses"):
            if rs.type != "regulatory" or rt.type != "coding":
                raise GenomeError(f"{where}: {kind} runs from a regulatory to a coding region")
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
