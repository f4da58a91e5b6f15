"""`homologous_crossover` of DOGMA genome documents: one aligned relative cut in both
parents, the two aligned units recombined (`evolution.spaces.dogma.operators.vary` wraps it
as the space's crossover operator)."""

from __future__ import annotations

import copy
import random
from typing import Any

from dogma_evolve.evolution.spaces.contract import Discard
from dogma_evolve.evolution.spaces.dogma import guards
from dogma_evolve.genome.resize import at_width

Doc = dict[str, Any]


def fresh_id(doc: Doc, prefix: str) -> str:
    """An unused region id of `prefix` and a number (the region count, then upwards)."""
    taken = {r["id"] for r in doc["regions"]}
    n = len(doc["regions"])
    while f"{prefix}{n}" in taken:
        n += 1
    return f"{prefix}{n}"


CROSSOVER_TRIES = 8  # aligned cuts drawn before a crossover gives up keeping a mixer


def _units(doc: Doc) -> list[tuple[int, int]]:
    """The homologous units of a document after its structural region, as region-index
    ranges [start, end): a promoter with the coding region it precedes, or one region."""
    regions, out, k = doc["regions"], [], 1
    while k < len(regions):
        nxt = regions[k + 1]["type"] if k + 1 < len(regions) else None
        pair = regions[k]["type"] == "promoter" and nxt == "coding"
        out.append((k, k + 2 if pair else k + 1))
        k = out[-1][1]
    return out


def _recombine(a: Doc, b: Doc, ia: int, ib: int, v: float) -> tuple[list[Doc], int, int]:
    """a's regions up to its unit `ia` and b's after its unit `ib` (`_units`).

    When those two aligned units are both coding, they recombine: a's first round(v·|a|)
    bases and b's last ones, as many as make the child's unit round(v·|a| + (1-v)·|b|)
    bases long (|a|, |b| the units' base counts), in the unit (promoter, id) of the parent
    that gives most of them (a's when v ≥ 1/2); otherwise the unit is a's (v ≥ 1/2) or b's.
    Returns the child's regions and the cuts: the child is a[:cut_a] + b[cut_b:] region by
    region, the recombined coding region counted on the side whose unit it took."""
    (sa, ea), (sb, eb) = _units(a)[ia], _units(b)[ib]
    ca, cb = a["regions"][ea - 1], b["regions"][eb - 1]
    head, tail = copy.deepcopy(a["regions"][: ea if v >= 0.5 else sa]), copy.deepcopy(b["regions"][eb:])
    if ca["type"] == cb["type"] == "coding":
        la, lb = len(ca["bases"]), len(cb["bases"])
        target = max(1, round(v * la + (1 - v) * lb))  # the child's unit: its parents' length
        ka = min(round(v * la), target)
        bases = ca["bases"][:ka] + cb["bases"][max(0, lb - (target - ka)) :]
        if v >= 0.5:
            head[-1]["bases"] = copy.deepcopy(bases)
            return head + tail, ea, eb
        unit = copy.deepcopy(b["regions"][sb:eb])
        unit[-1]["bases"] = copy.deepcopy(bases)
        return head + unit + tail, sa, sb
    return (head + tail, ea, eb) if v >= 0.5 else (head + copy.deepcopy(b["regions"][sb:]), sa, sb)


def homologous_crossover(a: Doc, b: Doc, rng: random.Random) -> tuple[Doc, dict[str, Any]]:
    """Recombine aligned regions: a's head (with its structural region), b's tail.

    One relative position u cuts both parents' units (`_units`) at the same place, unit
    ⌊u·|a|⌋ of a and ⌊u·|b|⌋ of b, so the child has about u·|a| + (1-u)·|b| units and stays
    in the parents' size range; the two aligned units recombine their bases at one more
    relative position v (`_recombine`). Both parents are first put at the width
    (`genome.resize.at_width`) of the one that gives the child most of its units, so every
    gene fits the structural region (a's settings otherwise) and the child's size stays
    near its parents'. Of up to `CROSSOVER_TRIES` draws the first child that keeps an
    expressed sequence mixer (when a parent has one) is taken. Region ids of the tail are
    renamed when they collide; edges survive when both ends do (repair drops the ones that
    no longer fit). Returns the child document and its change record (location: the cuts,
    after: the child's region ids)."""
    na, nb = len(_units(a)), len(_units(b))
    if not na or not nb:
        raise Discard("a parent has no region besides its structural one")
    widths = (a["regions"][0]["settings"]["d_model"], b["regions"][0]["settings"]["d_model"])
    resized: dict[int, tuple[Doc, Doc]] = {}
    needs_mixer = bool(guards.mixers_of_doc(a) or guards.mixers_of_doc(b))
    for _ in range(CROSSOVER_TRIES):
        u, v = rng.random(), rng.random()
        ia, ib = min(int(u * na), na - 1), min(int(u * nb), nb - 1)
        width = widths[0] if ia + v >= nb - ib - v else widths[1]
        if width not in resized:
            resized[width] = (at_width(a, width, {}), at_width(b, width, {}))
        a_w, b_w = resized[width]
        regions, cut_a, cut_b = _recombine(a_w, b_w, ia, ib, v)
        head, tail = regions[:cut_a], regions[cut_a:]
        child: Doc = {"regions": head, "edges": []}
        rename: dict[str, str] = {}
        for r in tail:
            taken = {x["id"] for x in child["regions"]}
            new_id = r["id"] if r["id"] not in taken else fresh_id(child, r["id"][0])
            rename[b_w["regions"][cut_b + len(rename)]["id"]] = new_id
            child["regions"].append({**r, "id": new_id})
        kept = {r["id"] for r in head}
        child["edges"] = [dict(e) for e in a_w["edges"] if e["source"] in kept and e["target"] in kept]
        child["edges"] += [
            {**e, "source": rename[e["source"]], "target": rename[e["target"]]}
            for e in b_w["edges"]
            if e["source"] in rename and e["target"] in rename
        ]
        if not needs_mixer or guards.mixers_of_doc(child):
            after = [r["id"] for r in child["regions"]]
            return child, {"location": f"a[:{cut_a}] + b[{cut_b}:]", "before": None, "after": after}
    raise Discard(f"no aligned cut of {CROSSOVER_TRIES} keeps a sequence mixer")
