"""The one resize rule: a genome document at another width or depth, same architecture.

Used by the search's initial population (scaled-down presets, `evolution.spaces.dogma.seeds`)
and by size ladders (`evolution.scale.ladder`); both go through `at_width` and one of the two
depth rules, so a preset at a seed's shape and a ladder's rung at that shape are one genome.

Width (`at_width(doc, width, pinned)`, from the document's own ``d_model`` w0 to w):

* attention keeps its heads while ``w / 16`` allows, ``heads' = max(1, min(heads, w // 16))``;
  its key-value heads become the largest divisor of ``heads'`` that is at most the old count;
  its per-head width keeps its share of ``d_model``,
  ``head_dim' = head_dim · w · heads / (w0 · heads')`` (rounded down; even under RoPE);
* ``hidden`` and ``width`` params keep their ratio to ``d_model``: ``max(8, ⌊p · w / w0⌋₈)``
  (a multiple of 8);
* a param that follows its kind's derivation rule at w0 (an mlp's ``hidden = 4·d_model``,
  ``head_dim = d_model / heads``, Mamba's ``dt_rank``) is set to 0 and so re-derived at w;
* under RoPE, the base keeps its ratio to the context, ``θ' = max(100, round(θ · L' / L))``,
  when the pinned context L' differs from the document's L (other positions leave the unused
  ``rope_theta`` alone);
* the structural settings take ``d_model = w`` and the task's ``pinned`` vocabulary and context.

At its own width a document changes only in its pinned settings.

Depth: `copies_at_most(doc, c)` caps every promoter's ``copies`` at c (the seeds' shapes);
`stacked(doc, depth)` stacks the deepest coding region ``depth`` times and every other one in
proportion, adding a promoter to a region that needs more than one copy (the ladders' axis).

Every function takes a canonical document (`Genome.to_dict()`) and returns a new one; the
caller builds the `Genome` (which validates it).
"""

from __future__ import annotations

import copy
from typing import Any

from dogma_evolve.genome.schema import KINDS

Doc = dict[str, Any]
SCALED = ("hidden", "width")  # widths that keep their ratio to d_model


def largest_divisor_at_most(n: int, limit: int) -> int:
    """The largest k ≤ ``limit`` (and ≥ 1) that divides ``n``."""
    return max(k for k in range(1, max(1, min(n, limit)) + 1) if n % k == 0)


def derived_params(kind: str, params: dict[str, Any], structural: dict[str, Any]) -> set[str]:
    """The int params of a canonical gene that equal what its kind's rule derives from 0."""
    spec = KINDS[kind]
    out = set()
    for name, p in spec.params.items():
        if p.type != "int" or p.default != 0 or not params.get(name):
            continue
        try:
            if spec.derive({**params, name: 0}, structural)[name] == params[name]:
                out.add(name)
        except (ValueError, KeyError, ZeroDivisionError):
            continue
    return out


def derived_table(doc: Doc) -> list[list[set[str]]]:
    """Per region, per base of ``doc``: the params that follow their derivation rule."""
    structural = doc["regions"][0]["settings"]
    return [
        [derived_params(b["kind"], b.get("params", {}), structural) for b in r.get("bases", [])]
        for r in doc["regions"]
    ]


def at_width(
    doc: Doc, width: int, pinned: dict[str, Any], derived: list[list[set[str]]] | None = None
) -> Doc:
    """``doc`` at ``d_model = width`` (module docstring); ``derived``: `derived_table(doc)`,
    passed by callers that resize one document many times."""
    derived = derived_table(doc) if derived is None else derived
    doc = copy.deepcopy(doc)
    regions = doc["regions"]
    structural = regions[0]["settings"]
    w, w0 = width, int(structural["d_model"])
    if structural.get("positions") == "rope" and pinned.get("max_len") and structural.get("max_len"):
        if pinned["max_len"] != structural["max_len"] and "rope_theta" in structural:
            theta = structural["rope_theta"] * pinned["max_len"] / structural["max_len"]
            structural["rope_theta"] = float(max(100.0, round(theta)))
    structural.update(d_model=w, **pinned)
    if w == w0:
        return doc
    for r, rules in zip(regions, derived, strict=True):
        for b, rule in zip(r.get("bases", []), rules, strict=True):
            p = b.setdefault("params", {})
            if b["kind"] == "attention":
                heads = max(1, min(p["heads"], w // 16))
                kv = largest_divisor_at_most(heads, p.get("kv_heads") or heads)
                head_dim = max(1, p["head_dim"] * w * p["heads"] // (w0 * heads))
                if structural.get("positions") == "rope" and head_dim % 2 and head_dim > 1:
                    head_dim -= 1
                p.update(heads=heads, kv_heads=kv, head_dim=head_dim)
                continue
            for name in p:
                if name in rule:
                    p[name] = 0  # re-derived at the new width
                elif name in SCALED:
                    p[name] = max(8, int(p[name] * w / w0) // 8 * 8)
    return doc


def copies_at_most(doc: Doc, copies: int) -> Doc:
    """``doc`` with every promoter's ``copies`` capped at ``copies``."""
    doc = copy.deepcopy(doc)
    for r in doc["regions"]:
        if r["type"] == "promoter":
            r["settings"]["copies"] = min(r["settings"].get("copies", 1), copies)
    return doc


def own_depth(doc: Doc) -> int:
    """The copies of the deepest coding region (1 for a region without a promoter)."""
    regions = doc["regions"]
    depths = [1]
    for prev, r in zip([None, *regions], regions, strict=False):
        if r["type"] == "coding" and prev is not None and prev["type"] == "promoter":
            depths.append(int(prev["settings"].get("copies", 1)))
    return max(depths)


def stacked(doc: Doc, depth: int, base_depth: int | None = None) -> Doc:
    """``doc`` with its deepest coding region at ``depth`` copies and every other coding region
    in proportion, ``max(1, round(own · depth / base_depth))`` (``base_depth``: `own_depth`
    unless given); a region without a promoter gets one when it needs more than one copy."""
    doc = copy.deepcopy(doc)
    base_depth = own_depth(doc) if base_depth is None else base_depth
    out: list[Doc] = []
    ids = {r["id"] for r in doc["regions"]}
    for r in doc["regions"]:
        if r["type"] != "coding":
            out.append(r)
            continue
        prev = out[-1] if out else None
        own = prev["settings"].get("copies", 1) if prev and prev["type"] == "promoter" else 1
        copies = max(1, round(own * depth / base_depth))
        if prev is not None and prev["type"] == "promoter":
            prev["settings"]["copies"] = copies
        elif copies > 1:
            pid = next(
                f"p{r['id']}{n or ''}" for n in range(len(ids) + 1) if f"p{r['id']}{n or ''}" not in ids
            )
            ids.add(pid)
            out.append({"id": pid, "type": "promoter", "settings": {"copies": copies}})
        out.append(r)
    doc["regions"] = out
    return doc


__all__ = [
    "SCALED",
    "at_width",
    "copies_at_most",
    "derived_params",
    "derived_table",
    "largest_divisor_at_most",
    "own_depth",
    "stacked",
]
