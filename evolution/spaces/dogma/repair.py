"""Repair: bring a varied genome document back to validity where a small fix exists.

Fixes are local and deterministic (no randomness): structural settings pinned by the
task (vocabulary, context) are restored; attention heads are made consistent; a promoter
left without its coding region is dropped; edges that no longer fit (dangling, upstream,
between regions of the wrong type, `shares` between regions whose genes now differ) are
dropped (an `activates`/`represses` edge into a regulatory region that no longer emits a
signal among them). Anything else is left for validation to refuse, and the child is
discarded.
"""

from __future__ import annotations

from typing import Any

from dogma_evolve.genome.validate import SIGNAL_KIND

Doc = dict[str, Any]


def _largest_divisor_at_most(n: int, limit: int) -> int:
    return max(k for k in range(1, max(1, min(n, limit)) + 1) if n % k == 0)


def _repair_attention(params: dict[str, Any], positions: str) -> None:
    heads = params.get("heads", 4)
    if params.get("kv_heads"):
        params["kv_heads"] = _largest_divisor_at_most(heads, params["kv_heads"])
    if positions == "rope" and params.get("head_dim", 0) % 2:
        params["head_dim"] += 1


def repair(doc: Doc, pinned: dict[str, Any] | None = None) -> Doc:
    """Return a repaired copy-in-place of `doc` (the caller owns it)."""
    regions = doc.get("regions", [])
    if regions and regions[0].get("type") == "structural":
        regions[0].setdefault("settings", {}).update(pinned or {})
        positions = regions[0]["settings"].get("positions", "rope")
    else:
        positions = "rope"
    for r in regions:
        for b in r.get("bases", []):
            if b.get("kind") == "attention":
                _repair_attention(b.setdefault("params", {}), positions)

    # A promoter must be followed by a coding region.
    kept = []
    for k, r in enumerate(regions):
        nxt = regions[k + 1] if k + 1 < len(regions) else None
        if r["type"] == "promoter" and (nxt is None or nxt["type"] != "coding"):
            continue
        kept.append(r)
    doc["regions"] = kept

    order = {r["id"]: k for k, r in enumerate(kept)}
    types = {r["id"]: r["type"] for r in kept}
    genes = {r["id"]: r.get("bases") for r in kept}
    # Regulators that an `activates`/`represses` edge may target: those that emit a signal.
    signalling = {
        r["id"]
        for r in kept
        if r["type"] == "regulatory" and any(b.get("kind") == SIGNAL_KIND for b in r.get("bases", []))
    }
    edges, seen, share_targets = [], set(), set()
    for e in doc.get("edges", []):
        s, t, kind = e.get("source"), e.get("target"), e.get("kind")
        if s not in order or t not in order or order[s] >= order[t] or (s, t) in seen:
            continue
        if kind in ("activates", "represses") and (
            types[s] != "regulatory" or (types[t] != "coding" and t not in signalling)
        ):
            continue
        if kind in ("shares", "loop") and (types[s], types[t]) != ("coding", "coding"):
            continue
        if kind == "shares" and (genes[s] != genes[t] or t in share_targets):
            continue
        seen.add((s, t))
        if kind == "shares":
            share_targets.add(t)
        edges.append(e)
    # A region that receives shared weights cannot itself be a source of sharing.
    doc["edges"] = [e for e in edges if not (e["kind"] == "shares" and e["source"] in share_targets)]
    return doc
