"""The changes `evolve ablate` makes to a genome: each module removed, or replaced by an
alternative of matched size, one change per variant.

Every change has a short stable name (what ``--only`` takes) and a genome that must validate;
a change whose genome does not validate, that changes nothing, or that gives the genome of an
earlier change is kept with ``genome`` None and the reason. The changes, in this order:

* ``-gene:c1.T:mla`` — a coding gene removed (``c1/2.T:mla`` when its region holds two of
  that base type and kind). A region's only gene goes with its region, the promoter before
  it and every edge that touches it.
* ``-edge:r0>c0`` — one edge removed (any kind: a ``shares`` target then has its own
  weights, a ``loop`` skip is gone, a gated region runs ungated).
* ``-regulation`` — every regulatory region and its edges removed: no regulation at all;
  with several regulatory regions also ``-region:r0`` for each, removed with its edges.
* ``c0:x2→x1`` — a promoter's ``copies`` set to 1 (``P[x2]`` → ``P[x1]``).
* ``c1.dna.pathA:min`` … ``pathD:min`` — one path of a ``dna`` gene at the least its own
  params allow, the block's size restored by another param. The gene has no switch that
  turns a path off (every path's params are at least 1), so this is the nearest the genome
  can say: path A with one reaction in one layer (rank 1) and the width (paths B, D) grown; path C with
  one lane of two species and the width grown; path B with one species per channel and
  path D with a window of 1, each with the reactions (path A) grown. Paths B and D share
  the width, so at their minimum they keep their projections: a one-species selective scan
  and a pointwise gated pairing, not nothing.
* ``c1.dna→gru`` — the four paths replaced by one recurrent path, a GRU whose ``hidden``
  gives the nearest parameter count.
* ``c1.tetra→attention`` (``tetra_reach`` too) — TetraMemory replaced by the causal softmax
  attention gene nearest its size (heads, key-value heads, head_dim: ``attention_options``;
  ``tetra_reach``'s q, k, v, o projections of d × d are 4-head attention's, ``tetra``'s three
  (q, v, o) take grouped or narrower heads), on a T base (attention sits on T only).

Size matching: a replacement's block (one copy, ``BlockConfig.num_params``) must lie within
``MATCH_TOLERANCE`` of the block it replaces, else the change is skipped and says by how
much it missed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dogma_evolve.genome import Genome, GenomeError
from dogma_evolve.genome.schema import KINDS

MATCH_TOLERANCE = 0.05  # a size-matched block lies within 5 % of the one it replaces
ARROW = "→"  # in names; ``--only`` also takes "->"

# path -> (its own params at their minimum, the param that restores the block's size)
DNA_PATHS: dict[str, tuple[dict[str, int], str]] = {
    "A": ({"reactions": 1, "depth": 1}, "width"),
    "B": ({"d_state": 1}, "reactions"),
    "C": ({"lanes": 1, "species": 2}, "width"),
    "D": ({"window": 1}, "reactions"),
}
ATTENTION_HEADS = (4, 2, 8, 1, 16)
TETRA_KINDS = (
    "tetra",
    "tetra_reach",
)  # TetraMemory's kinds (the mesh, the fixed reach): each replaced by attention


@dataclass(frozen=True)
class Change:
    """One ablation of a genome: its name, a line for people and the changed genome (None
    when skipped, ``reason`` then says why). ``block`` is (before, after) parameters of one
    copy of a replaced block, for size-matched changes."""

    name: str
    what: str
    genome: Genome | None
    reason: str | None = None
    block: tuple[int, int] | None = None


REMOVALS = ("gene:", "edge:", "region:", "regulation")  # the names that start with "-"


def normalise(name: str) -> str:
    """A change name as typed: ``->`` stands for ``→``, blanks around it are ignored, and a
    removal may drop its leading ``-`` (``--only gene:c1.T:mla``: argparse would read
    ``--only -gene:...`` as an option; ``--only=-gene:...`` works too)."""
    name = name.strip().replace("->", ARROW)
    return "-" + name if name.startswith(REMOVALS) else name


def block_params(kind: str, params: Mapping[str, Any], structural: Mapping[str, Any]) -> int:
    """Parameters of one layer of a gene (its block config's ``num_params``)."""
    from dogma_evolve.phenotype.registry import REGISTRY

    return int(REGISTRY[kind].config.from_gene(dict(params), structural).num_params())


# -- editing a genome's document -------------------------------------------------------------
def _doc(genome: Genome) -> dict[str, Any]:
    return copy.deepcopy(genome.to_dict())


def _without_region(doc: dict[str, Any], region_id: str) -> dict[str, Any]:
    """The document without a region, the promoter in front of it and its edges."""
    regions = doc["regions"]
    i = next(k for k, r in enumerate(regions) if r["id"] == region_id)
    drop = {i} | ({i - 1} if i > 0 and regions[i - 1]["type"] == "promoter" else set())
    doc["regions"] = [r for k, r in enumerate(regions) if k not in drop]
    doc["edges"] = [e for e in doc["edges"] if region_id not in (e["source"], e["target"])]
    return doc


def _location(region: Any, j: int) -> str:
    """``c1`` when the region holds one base of this type and kind, else ``c1/j``."""
    b = region.bases[j]
    same = sum(o.type == b.type and o.gene.kind == b.gene.kind for o in region.bases)
    return region.id if same == 1 else f"{region.id}/{j}"


def _with_gene(genome: Genome, region_id: str, j: int, base: str, kind: str, params: dict[str, Any]) -> dict:
    doc = _doc(genome)
    region = next(r for r in doc["regions"] if r["id"] == region_id)
    region["bases"][j] = {"base": base, "kind": kind, "params": params}
    return doc


# -- size matching ---------------------------------------------------------------------------
def nearest(size_of: Callable[[int], int], target: int, low: int, high: int) -> int:
    """The integer v in [low, high] whose ``size_of(v)`` (non-decreasing in v) is nearest
    ``target``: a binary search for the first v at or above it, then v or v - 1."""
    lo, hi = low, high
    while lo < hi:
        mid = (lo + hi) // 2
        if size_of(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    if lo > low and abs(size_of(lo - 1) - target) <= abs(size_of(lo) - target):
        return lo - 1
    return lo


def _matched(before: int, after: int) -> str | None:
    """None when ``after`` lies within the tolerance of ``before``, else why not."""
    miss = abs(after - before) / before
    if miss <= MATCH_TOLERANCE:
        return None
    return (
        f"no size match within {MATCH_TOLERANCE:.0%}: {after:,} against {before:,} parameters ({miss:+.0%})"
    )


# -- the changes -----------------------------------------------------------------------------
def _built(name: str, what: str, doc: dict[str, Any], block: tuple[int, int] | None = None) -> Change:
    try:
        return Change(name, what, Genome.from_dict(doc), block=block)
    except GenomeError as e:
        return Change(name, what, None, f"invalid genome: {e}", block)


def _gene_removals(genome: Genome) -> list[Change]:
    out = []
    for region in genome.regions:
        if region.type != "coding":
            continue
        for j, b in enumerate(region.bases):
            name = f"-gene:{_location(region, j)}.{b.type}:{b.gene.kind}"
            if len(region.bases) == 1:
                what = f"{b.gene.kind} removed with its region {region.id} (its only gene)"
                out.append(_built(name, what, _without_region(_doc(genome), region.id)))
                continue
            doc = _doc(genome)
            target = next(r for r in doc["regions"] if r["id"] == region.id)
            del target["bases"][j]
            out.append(_built(name, f"{b.gene.kind} removed from {region.id}", doc))
    return out


def _edge_removals(genome: Genome) -> list[Change]:
    out = []
    for e in genome.edges:
        doc = _doc(genome)
        doc["edges"] = [x for x in doc["edges"] if (x["source"], x["target"]) != (e.source, e.target)]
        out.append(_built(f"-edge:{e.source}>{e.target}", f"the {e.kind} edge removed", doc))
    return out


def _regulation_removals(genome: Genome) -> list[Change]:
    """``-regulation``, and with several regulatory regions each one's ``-region:ID``."""
    regulatory = [r.id for r in genome.regions if r.type == "regulatory"]
    if not regulatory:
        return []
    doc = _doc(genome)
    for rid in regulatory:
        doc = _without_region(doc, rid)
    their = "its" if len(regulatory) == 1 else "their"
    what = f"no regulation: {', '.join(regulatory)} removed with {their} edges"
    out = [_built("-regulation", what, doc)]
    if len(regulatory) > 1:
        out += [
            _built(
                f"-region:{rid}",
                f"regulatory region {rid} removed with its edges",
                _without_region(_doc(genome), rid),
            )
            for rid in regulatory
        ]
    return out


def _copies(genome: Genome) -> list[Change]:
    out = []
    for prev, cur in zip(genome.regions, genome.regions[1:], strict=False):
        n = prev.settings_dict.get("copies", 1) if prev.type == "promoter" else 1
        if n <= 1 or not prev.settings_dict["expressed"]:
            continue
        doc = _doc(genome)
        next(r for r in doc["regions"] if r["id"] == prev.id)["settings"]["copies"] = 1
        out.append(_built(f"{cur.id}:x{n}{ARROW}x1", f"{cur.id} expressed once instead of {n} times", doc))
    return out


def _dna(genome: Genome, region: Any, j: int) -> list[Change]:
    structural = genome.structural
    b = region.bases[j]
    params = b.gene.as_dict
    before = block_params("dna", params, structural)
    loc = _location(region, j)
    out = []
    for path, (least, knob) in DNA_PATHS.items():
        name = f"{loc}.dna.path{path}:min"
        shrunk = {**params, **least}
        if all(params.get(k, KINDS["dna"].params[k].default) == v for k, v in least.items()):
            out.append(Change(name, "", None, f"path {path} is already at its minimum"))
            continue
        spec = KINDS["dna"].params[knob]

        def size(v: int, shrunk: dict[str, Any] = shrunk, knob: str = knob) -> int:
            return block_params("dna", {**shrunk, knob: v}, structural)

        v = nearest(size, before, int(spec.low or 1) or 1, int(spec.high or 1))
        after = size(v)
        what = (
            f"path {path} at its minimum ({', '.join(f'{k} {x}' for k, x in least.items())}), "
            f"{knob} {params[knob]} → {v} to keep the block's size"
        )
        miss = _matched(before, after)
        if miss is not None:
            out.append(Change(name, what, None, miss, (before, after)))
            continue
        doc = _with_gene(genome, region.id, j, b.type, "dna", {**shrunk, knob: v})
        out.append(_built(name, what, doc, (before, after)))
    # four paths -> one recurrent path of equal parameters
    spec = KINDS["gru"].params["hidden"]
    hidden = nearest(lambda h: block_params("gru", {"hidden": h}, structural), before, 1, int(spec.high or 1))
    after = block_params("gru", {"hidden": hidden}, structural)
    name, what = f"{loc}.dna{ARROW}gru", f"the four paths replaced by one GRU (hidden {hidden})"
    miss = _matched(before, after)
    if miss is not None:
        out.append(Change(name, what, None, miss, (before, after)))
    else:
        doc = _with_gene(genome, region.id, j, "T", "gru", {"hidden": hidden})
        out.append(_built(name, what, doc, (before, after)))
    return out


def attention_options(structural: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Attention genes that fit the width, in order of preference: for each of
    ``ATTENTION_HEADS``, multi-head with head_dim d / heads first, then every key-value
    grouping (kv_heads dividing heads) and even head_dim up to 2·d."""
    d = structural["d_model"]
    out, seen = [], set()
    for heads in ATTENTION_HEADS:
        groups = [heads] + [k for k in range(heads - 1, 0, -1) if heads % k == 0]
        widths = ([d // heads] if d % heads == 0 else []) + list(range(2, 2 * d + 1, 2))
        for kv in groups:
            for head_dim in widths:
                given = {"heads": heads, "kv_heads": kv, "head_dim": head_dim}
                try:
                    params = KINDS["attention"].complete(given, structural)
                except ValueError:
                    continue
                key = tuple(sorted(params.items()))
                if key not in seen:
                    seen.add(key)
                    out.append(params)
    return out


def _tetra(genome: Genome, region: Any, j: int) -> list[Change]:
    """TetraMemory → the attention gene nearest its size (the first of equals)."""
    structural = genome.structural
    b = region.bases[j]
    kind = b.gene.kind
    before = block_params(kind, b.gene.as_dict, structural)
    name = f"{_location(region, j)}.{kind}{ARROW}attention"
    options = attention_options(structural)
    if not options:
        return [Change(name, "", None, f"no attention gene fits d_model {structural['d_model']}")]
    sizes = [block_params("attention", o, structural) for o in options]
    best = min(range(len(options)), key=lambda i: abs(sizes[i] - before))
    params, after = options[best], sizes[best]
    what = (
        f"TetraMemory replaced by causal attention ({params['heads']} heads, {params['kv_heads']} "
        f"key-value heads, head_dim {params['head_dim']})"
        + ("" if b.type == "T" else f" on a T base (was {b.type})")
    )
    miss = _matched(before, after)
    if miss is not None:
        return [Change(name, what, None, miss, (before, after))]
    doc = _with_gene(genome, region.id, j, "T", "attention", params)
    return [_built(name, what, doc, (before, after))]


def _replacements(genome: Genome) -> list[Change]:
    out = []
    for region in genome.regions:
        if region.type != "coding":
            continue
        for j, b in enumerate(region.bases):
            if b.gene.kind == "dna":
                out += _dna(genome, region, j)
            elif b.gene.kind in TETRA_KINDS:
                out += _tetra(genome, region, j)
    return out


def derive_changes(genome: Genome) -> list[Change]:
    """Every change of ``genome`` (module docstring), in order; a change that changes
    nothing, or repeats an earlier change's genome, is skipped and says so."""
    changes = (
        _gene_removals(genome)
        + _edge_removals(genome)
        + _regulation_removals(genome)
        + _copies(genome)
        + _replacements(genome)
    )
    seen: dict[str, str] = {genome.id: ""}
    out = []
    for c in changes:
        if c.genome is not None and c.genome.id in seen:
            first = seen[c.genome.id]
            why = "changes nothing" if not first else f"the same genome as {first}"
            c = Change(c.name, c.what, None, why, c.block)
        elif c.genome is not None:
            seen[c.genome.id] = c.name
        out.append(c)
    return out


__all__ = ["ARROW", "MATCH_TOLERANCE", "Change", "block_params", "derive_changes", "nearest", "normalise"]
