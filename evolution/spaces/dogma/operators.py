"""Variation operators on DOGMA genomes, named after what they do to the genome.

Every operator takes canonical genome documents (`Genome.to_dict()`) and a seeded
`random.Random`, and returns a `Variation`: the child document plus a change record
(op, location, before, after). Operators may produce invalid documents; `vary` repairs
what it can (`evolution.spaces.dogma.repair`) and discards the rest with a reason. Nothing here draws
from a global random stream.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evolution.spaces.contract import Child, Discard
from genome import KINDS, PROMOTER, STRUCTURAL, Genome, GenomeError
from genome.schema import ParamSpec
from genome.validate import SIGNAL_KIND

Doc = dict[str, Any]


@dataclass
class Variation:
    """A child document and what changed (an operator that cannot act raises Discard)."""

    op: str
    child: Doc
    change: dict[str, Any] = field(default_factory=dict)


# -- helpers ------------------------------------------------------------------------------
def _coding(doc: Doc) -> list[int]:
    return [i for i, r in enumerate(doc["regions"]) if r["type"] == "coding"]


def _fresh_id(doc: Doc, prefix: str) -> str:
    taken = {r["id"] for r in doc["regions"]}
    n = len(doc["regions"])
    while f"{prefix}{n}" in taken:
        n += 1
    return f"{prefix}{n}"


def mutate_value(spec: ParamSpec, value: Any, rng: random.Random) -> Any:
    """A neighbouring value: ints double/halve (±1 when small), floats scale, others flip."""
    if spec.type == "bool":
        return not value
    if spec.type == "choice":
        return rng.choice([c for c in spec.choices if c != value] or [value])
    if spec.type == "int":
        if value <= 4:
            new = value + rng.choice((-1, 1))
        else:
            new = value * 2 if rng.random() < 0.5 else value // 2
    else:
        new = value * (1.5 if rng.random() < 0.5 else 1 / 1.5)
    lo = spec.low if spec.low is not None else new
    hi = spec.high if spec.high is not None else new
    return type(value)(min(max(new, lo), hi))


def random_base(base_type: str, rng: random.Random, region_type: str = "coding") -> dict:
    """A base of `base_type` with a random legal kind and default (derived) params."""
    kinds = [k for k, s in KINDS.items() if base_type in s.bases and region_type in s.regions]
    if not kinds:
        raise Discard(f"no kind for a {base_type} base in a {region_type} region")
    return {"base": base_type, "kind": rng.choice(kinds), "params": {}}


def _pick_base(doc: Doc, rng: random.Random) -> tuple[int, int]:
    spots = [
        (i, j)
        for i, r in enumerate(doc["regions"])
        if r["type"] in ("coding", "regulatory")
        for j in range(len(r["bases"]))
    ]
    if not spots:
        raise Discard("genome has no bases")
    return rng.choice(spots)


# -- mutation operators -------------------------------------------------------------------
def point_substitution(doc: Doc, rng: random.Random) -> Variation:
    """Change one hyperparameter of one gene to a neighbouring value."""
    i, j = _pick_base(doc, rng)
    base = doc["regions"][i]["bases"][j]
    specs = KINDS[base["kind"]].params
    if not specs:
        raise Discard(f"kind {base['kind']} has no hyperparameters")
    name = rng.choice(sorted(specs))
    before = base["params"].get(name, specs[name].default)
    after = mutate_value(specs[name], before, rng)
    if after == before:
        raise Discard(f"{name} already at its bound")
    base["params"][name] = after
    loc = f"{doc['regions'][i]['id']}/{j}/{base['kind']}.{name}"
    return Variation("point_substitution", doc, {"location": loc, "before": before, "after": after})


def kind_substitution(doc: Doc, rng: random.Random) -> Variation:
    """Replace a gene's kind by another kind legal on the same base type."""
    i, j = _pick_base(doc, rng)
    region = doc["regions"][i]
    base = region["bases"][j]
    kinds = [
        k
        for k, s in KINDS.items()
        if base["base"] in s.bases and region["type"] in s.regions and k != base["kind"]
    ]
    if not kinds:
        raise Discard(f"no other kind for a {base['base']} base")
    before = base["kind"]
    region["bases"][j] = {"base": base["base"], "kind": rng.choice(kinds), "params": {}}
    return Variation(
        "kind_substitution",
        doc,
        {"location": f"{region['id']}/{j}", "before": before, "after": region["bases"][j]["kind"]},
    )


def base_insertion(doc: Doc, rng: random.Random) -> Variation:
    """Insert a new T or A base at a random place in a coding region."""
    coding = _coding(doc)
    if not coding:
        raise Discard("genome has no coding region")
    i = rng.choice(coding)
    bases = doc["regions"][i]["bases"]
    j = rng.randint(0, len(bases))
    new = random_base(rng.choice("TA"), rng)
    bases.insert(j, new)
    return Variation(
        "base_insertion",
        doc,
        {
            "location": f"{doc['regions'][i]['id']}/{j}",
            "before": None,
            "after": f"{new['base']}:{new['kind']}",
        },
    )


def base_deletion(doc: Doc, rng: random.Random) -> Variation:
    """Delete one base from a coding region that has more than one."""
    spots = [
        (i, j)
        for i in _coding(doc)
        if len(doc["regions"][i]["bases"]) > 1
        for j in range(len(doc["regions"][i]["bases"]))
    ]
    if not spots:
        raise Discard("no coding region with a base to spare")
    i, j = rng.choice(spots)
    gone = doc["regions"][i]["bases"].pop(j)
    return Variation(
        "base_deletion",
        doc,
        {
            "location": f"{doc['regions'][i]['id']}/{j}",
            "before": f"{gone['base']}:{gone['kind']}",
            "after": None,
        },
    )


def region_duplication(doc: Doc, rng: random.Random) -> Variation:
    """Duplicate a coding region (gene duplication), half the time sharing its weights."""
    coding = _coding(doc)
    if not coding:
        raise Discard("genome has no coding region")
    i = rng.choice(coding)
    source = doc["regions"][i]
    dup = copy.deepcopy(source)
    dup["id"] = _fresh_id(doc, "c")
    doc["regions"].insert(i + 1, dup)
    shares = rng.random() < 0.5 and not any(
        e["kind"] == "shares" and e["target"] == source["id"] for e in doc["edges"]
    )
    if shares:
        doc["edges"].append({"source": source["id"], "target": dup["id"], "kind": "shares"})
    return Variation(
        "region_duplication",
        doc,
        {"location": source["id"], "before": None, "after": dup["id"] + (" (shares)" if shares else "")},
    )


def regulatory_rewiring(doc: Doc, rng: random.Random) -> Variation:
    """Add, remove or flip an activates/represses edge (adding a gate region if needed)."""
    reg = [e for e in doc["edges"] if e["kind"] in ("activates", "represses")]
    choice = rng.random()
    if reg and choice < 0.3:
        e = rng.choice(reg)
        doc["edges"].remove(e)
        return Variation(
            "regulatory_rewiring",
            doc,
            {"location": f"{e['source']}->{e['target']}", "before": e["kind"], "after": None},
        )
    if reg and choice < 0.5:
        e = rng.choice(reg)
        before = e["kind"]
        e["kind"] = "represses" if before == "activates" else "activates"
        return Variation(
            "regulatory_rewiring",
            doc,
            {"location": f"{e['source']}->{e['target']}", "before": before, "after": e["kind"]},
        )
    order = {r["id"]: k for k, r in enumerate(doc["regions"])}
    sources = [r["id"] for r in doc["regions"] if r["type"] == "regulatory"]
    pairs = [
        (s, doc["regions"][t]["id"])
        for s in sources
        for t in _coding(doc)
        if order[s] < t
        and not any(e["source"] == s and e["target"] == doc["regions"][t]["id"] for e in doc["edges"])
    ]
    if not pairs:
        coding = _coding(doc)
        if not coding:
            raise Discard("genome has no coding region to regulate")
        t = rng.choice(coding)
        if t > 0 and doc["regions"][t - 1]["type"] == "promoter":
            t -= 1  # the gate region goes before the promoter, not between it and its region
        rid = _fresh_id(doc, "r")
        doc["regions"].insert(
            t, {"id": rid, "type": "regulatory", "bases": [random_base("C", rng, "regulatory")]}
        )
        target = next(r["id"] for r in doc["regions"][t + 1 :] if r["type"] == "coding")
        pairs = [(rid, target)]
    s, t = rng.choice(pairs)
    kind = rng.choice(("activates", "represses"))
    doc["edges"].append({"source": s, "target": t, "kind": kind})
    return Variation("regulatory_rewiring", doc, {"location": f"{s}->{t}", "before": None, "after": kind})


# -- regulatory hierarchies --------------------------------------------------------------
_REGULATION = ("activates", "represses")


def _emits_signal(region: Doc) -> bool:
    return region["type"] == "regulatory" and any(b["kind"] == SIGNAL_KIND for b in region["bases"])


def _regulable(doc: Doc, source: int) -> list[int]:
    """Indices of the regions an `activates`/`represses` edge from region `source` may
    target: later coding regions and later regulators that emit a signal, not yet joined."""
    src = doc["regions"][source]["id"]
    joined = {e["target"] for e in doc["edges"] if e["source"] == src}
    return [
        k
        for k, r in enumerate(doc["regions"])
        if k > source and (r["type"] == "coding" or _emits_signal(r)) and r["id"] not in joined
    ]


def _new_gate_region(doc: Doc, before: int) -> str:
    """Insert a regulatory region of one default `gate` base just upstream of region
    `before` (ahead of its promoter, if it has one); return its id."""
    if before > 0 and doc["regions"][before - 1]["type"] == "promoter":
        before -= 1
    rid = _fresh_id(doc, "r")
    doc["regions"].insert(
        before, {"id": rid, "type": "regulatory", "bases": [{"base": "C", "kind": SIGNAL_KIND, "params": {}}]}
    )
    return rid


def _cascade_connect(doc: Doc, rng: random.Random) -> Variation | None:
    """Join two regulators not yet joined: the upstream one gates the other's signal."""
    pairs = [
        (s, t)
        for s, r in enumerate(doc["regions"])
        if r["type"] == "regulatory"
        for t in _regulable(doc, s)
        if doc["regions"][t]["type"] == "regulatory"
    ]
    if not pairs:
        return None
    s, t = rng.choice(pairs)
    src, dst, kind = doc["regions"][s]["id"], doc["regions"][t]["id"], rng.choice(_REGULATION)
    doc["edges"].append({"source": src, "target": dst, "kind": kind})
    return Variation("regulatory_cascade", doc, {"location": f"{src}->{dst}", "before": None, "after": kind})


def _cascade_insert(doc: Doc, rng: random.Random) -> Variation | None:
    """A new regulator between a regulator and its target: Q -> X becomes Q -> R (activates)
    -> X (the edge's kind), R placed just upstream of X."""
    edges = [e for e in doc["edges"] if e["kind"] in _REGULATION]
    if not edges:
        return None
    e = rng.choice(edges)
    order = {r["id"]: k for k, r in enumerate(doc["regions"])}
    rid = _new_gate_region(doc, order[e["target"]])
    doc["edges"].remove(e)
    doc["edges"] += [
        {"source": e["source"], "target": rid, "kind": "activates"},
        {"source": rid, "target": e["target"], "kind": e["kind"]},
    ]
    return Variation(
        "regulatory_cascade",
        doc,
        {
            "location": f"{e['source']}->{e['target']}",
            "before": e["kind"],
            "after": f"{e['source']}->{rid}->{e['target']}",
        },
    )


def _cascade_head(doc: Doc, rng: random.Random) -> Variation | None:
    """A new regulator on top: upstream of a regulator that emits a signal (one level more)
    or, in a genome without one, of a coding region (the first level)."""
    tops = [k for k, r in enumerate(doc["regions"]) if _emits_signal(r)] or _coding(doc)
    if not tops:
        return None
    target = doc["regions"][rng.choice(tops)]["id"]
    rid = _new_gate_region(doc, next(k for k, r in enumerate(doc["regions"]) if r["id"] == target))
    kind = rng.choice(_REGULATION)
    doc["edges"].append({"source": rid, "target": target, "kind": kind})
    change = {"location": f"{rid}->{target}", "before": None, "after": kind}
    return Variation("regulatory_cascade", doc, change)


def _cascade_rewire(doc: Doc, rng: random.Random) -> Variation | None:
    """Move one end of an `activates`/`represses` edge: its source to another regulator
    upstream of its target, or its target to another region downstream of its source that
    it may regulate (so a direct edge can become a step of a cascade, and back)."""
    order = {r["id"]: k for k, r in enumerate(doc["regions"])}
    moves = []
    for e in doc["edges"]:
        if e["kind"] not in _REGULATION:
            continue
        s, t = order[e["source"]], order[e["target"]]
        moves += [(e, "target", doc["regions"][k]["id"]) for k in _regulable(doc, s)]
        moves += [
            (e, "source", r["id"])
            for k, r in enumerate(doc["regions"][:t])
            if r["type"] == "regulatory"
            and k != s
            and not any(x["source"] == r["id"] and x["target"] == e["target"] for x in doc["edges"])
        ]
    if not moves:
        return None
    e, end, new = rng.choice(moves)
    before = f"{e['source']}->{e['target']}"
    e[end] = new
    after = f"{e['source']}->{e['target']}"
    return Variation("regulatory_cascade", doc, {"location": before, "before": before, "after": after})


_CASCADE_MOVES = (_cascade_connect, _cascade_insert, _cascade_head, _cascade_rewire)


def regulatory_cascade(doc: Doc, rng: random.Random) -> Variation:
    """Grow or rewire a regulatory hierarchy, one of (drawn among those that can act):

    - connect: an `activates`/`represses` edge between two regulators not yet joined;
    - insert: a new regulator into a regulatory edge, Q -> X becoming Q -> R -> X;
    - head: a new regulator upstream of an existing one, gating it (a level on top), or, in
      a genome without a signalling regulator, of a coding region (the first level);
    - rewire: one end of a regulatory edge moved to another legal region.

    New regulators are one default `gate` base, so they emit a signal another may gate.
    Every edge points downstream, so the hierarchy stays acyclic."""
    moves = list(_CASCADE_MOVES)
    rng.shuffle(moves)
    for move in moves:
        variation = move(doc, rng)
        if variation is not None:
            return variation
    raise Discard("no regulatory region or coding region to build a hierarchy on")


def promoter_change(doc: Doc, rng: random.Random) -> Variation:
    """Change the expression of a coding region: copy count, silencing or strength."""
    coding = _coding(doc)
    if not coding:
        raise Discard("genome has no coding region")
    i = rng.choice(coding)
    if i == 0 or doc["regions"][i - 1]["type"] != "promoter":
        doc["regions"].insert(i, {"id": _fresh_id(doc, "p"), "type": "promoter", "settings": {}})
        i += 1
    settings = doc["regions"][i - 1]["settings"]
    name = rng.choice(("copies", "copies", "expressed", "strength"))
    before = settings.get(name, PROMOTER[name].default)
    after = mutate_value(PROMOTER[name], before, rng)
    settings[name] = after
    return Variation(
        "promoter_change",
        doc,
        {"location": f"{doc['regions'][i]['id']}.{name}", "before": before, "after": after},
    )


# Structural settings a mutation may touch; vocabulary and context belong to the task.
STRUCTURAL_MUTABLE = ("d_model", "positions", "norm", "norm_position", "tie_embeddings", "bias")


def structural_change(doc: Doc, rng: random.Random) -> Variation:
    """Change one global setting: width, positions, norm kind or placement, tying, biases."""
    settings = doc["regions"][0]["settings"]
    name = rng.choice(STRUCTURAL_MUTABLE)
    before = settings.get(name, STRUCTURAL[name].default)
    after = mutate_value(STRUCTURAL[name], before, rng)
    if after == before:
        raise Discard(f"structural {name} already at its bound")
    settings[name] = after
    return Variation("structural_change", doc, {"location": f"s.{name}", "before": before, "after": after})


def homologous_crossover(a: Doc, b: Doc, rng: random.Random) -> Variation:
    """Recombine at region boundaries: a's head (with its structural region), b's tail.

    Region ids of the tail are renamed when they collide; edges survive when both ends do
    (repair drops the ones that no longer fit)."""
    cut_a = rng.randint(1, len(a["regions"]))
    cut_b = rng.randint(1, len(b["regions"]))
    head, tail = copy.deepcopy(a["regions"][:cut_a]), copy.deepcopy(b["regions"][cut_b:])
    child = {"regions": head, "edges": []}
    rename: dict[str, str] = {}
    for r in tail:
        new_id = (
            r["id"] if r["id"] not in {x["id"] for x in child["regions"]} else _fresh_id(child, r["id"][0])
        )
        rename[r["id"]] = new_id
        child["regions"].append({**r, "id": new_id})
    kept = {r["id"] for r in head}
    child["edges"] = [dict(e) for e in a["edges"] if e["source"] in kept and e["target"] in kept]
    child["edges"] += [
        {**e, "source": rename[e["source"]], "target": rename[e["target"]]}
        for e in b["edges"]
        if e["source"] in rename and e["target"] in rename
    ]
    return Variation(
        "homologous_crossover",
        child,
        {
            "location": f"a[:{cut_a}] + b[{cut_b}:]",
            "before": None,
            "after": [r["id"] for r in child["regions"]],
        },
    )


MUTATIONS: dict[str, Callable[[Doc, random.Random], Variation]] = {
    "point_substitution": point_substitution,
    "kind_substitution": kind_substitution,
    "base_insertion": base_insertion,
    "base_deletion": base_deletion,
    "region_duplication": region_duplication,
    "regulatory_rewiring": regulatory_rewiring,
    "regulatory_cascade": regulatory_cascade,
    "promoter_change": promoter_change,
    "structural_change": structural_change,
}


def vary(op: str, parents: list[Genome], rng: random.Random, repair: Callable[[Doc], Doc]) -> Child:
    """Apply operator `op` to parents' documents, repair, validate; raise Discard if hopeless."""
    docs = [copy.deepcopy(p.to_dict()) for p in parents]
    if op == "homologous_crossover":
        variation = homologous_crossover(docs[0], docs[1], rng)
    else:
        variation = MUTATIONS[op](docs[0], rng)
    try:
        genome = Genome.from_dict(repair(variation.child))
    except GenomeError as e:
        raise Discard(f"{op}: unrepairable child: {e}") from None
    if genome.id == parents[0].id:
        raise Discard(f"{op}: child equals its parent")
    return Child(genome, op, {"op": op, **variation.change})
