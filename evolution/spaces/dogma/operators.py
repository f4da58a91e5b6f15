"""Variation operators on DOGMA genomes, named after what they do to the genome.

Every operator takes canonical genome documents (`Genome.to_dict()`) and a seeded
`random.Random`, and returns a `Variation`: the child document plus a change record
(op, location, before, after). Operators may produce invalid documents; `vary` repairs
what it can (`evolution.spaces.dogma.repair`) and discards the rest with a reason. Nothing here draws
from a global random stream: every operator is a function of its documents and its `rng`.

Guards (`evolution.spaces.dogma.guards` says what a sequence mixer and an expressed region
are): no variation of a parent with an expressed sequence mixer yields a child without one,
and none silences the last expressed coding region (the operators avoid such draws where
they choose, and `vary` discards what slips through, with the reason); a `promoter_change`
whose child decodes to the parent's model is discarded. Steps are small where the value has
an order: `window` of attention moves along global, then real windows halving (never to the
self-only window 1), `d_model` along the seed widths (`guards.SEED_WIDTHS`, the model resized
by `genome.resize.at_width`), `positions` to a related scheme (the ordered values live in
`guards`); `kind_substitution` stays in
the base's family (`guards.FAMILY`) with probability `IN_FAMILY`; `homologous_crossover`
(`evolution.spaces.dogma.crossover`) cuts both parents at one relative position and
recombines the two aligned regions there. `implicit_positions` is the one operator of two
coupled changes (no positions, an order-carrying mixer first): each alone mostly loses.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from dogma_evolve.evolution.spaces.contract import Child, Discard
from dogma_evolve.evolution.spaces.dogma import guards
from dogma_evolve.evolution.spaces.dogma.crossover import fresh_id, homologous_crossover
from dogma_evolve.genome import KINDS, PROMOTER, STRUCTURAL, Genome, GenomeError
from dogma_evolve.genome.kinds import drawable
from dogma_evolve.genome.resize import at_width
from dogma_evolve.genome.schema import ParamSpec
from dogma_evolve.genome.validate import SIGNAL_KIND

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


def mutate_value(spec: ParamSpec, value: Any, rng: random.Random) -> Any:
    """A neighbouring value, different from `value` where the bounds allow: ints double or
    halve (±1 when at most 4), floats scale by 1.5 or 1/1.5 (0 goes to the default), bools
    flip, choices move to another choice. Values are clamped to the spec's bounds; a step
    that the bounds clamp back to `value` is not drawn while the other direction moves."""
    if spec.type == "bool":
        return not value
    if spec.type == "choice":
        return rng.choice([c for c in spec.choices if c != value] or [value])
    if spec.type == "int":
        steps = [value - 1, value + 1] if value <= 4 else [value * 2, value // 2]
    elif value == 0:
        steps = [spec.default, spec.default]
    else:
        steps = [value * 1.5, value / 1.5]
    lo = spec.low if spec.low is not None else -float("inf")
    hi = spec.high if spec.high is not None else float("inf")
    clamped = [type(value)(min(max(new, lo), hi)) for new in steps]
    moving = [new for new in clamped if new != value]
    return rng.choice(moving) if moving else value


def random_base(
    base_type: str, rng: random.Random, region_type: str = "coding", enabled: Collection[str] = ()
) -> dict:
    """A base of `base_type` with a random legal kind and default (derived) params: a
    built-in kind or one of the ``enabled`` plugin kinds (`genome.kinds.drawable`)."""
    kinds = [k for k in drawable(enabled) if base_type in KINDS[k].bases and region_type in KINDS[k].regions]
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
    """Change one hyperparameter of one gene to a neighbouring value (`mutate_value`;
    attention's `window` along `guards.window_values`; a `conv` kernel never shrinks to 1)."""
    i, j = _pick_base(doc, rng)
    base = doc["regions"][i]["bases"][j]
    specs = KINDS[base["kind"]].params
    if not specs:
        raise Discard(f"kind {base['kind']} has no hyperparameters")
    name = rng.choice(sorted(specs))
    before = base["params"].get(name, specs[name].default)
    if name == "window" and base["kind"] in guards.WINDOWED:
        after: Any = guards.step_window(base["params"], doc["regions"][0]["settings"], rng)
    else:
        after = mutate_value(specs[name], before, rng)
        if name == "kernel" and base["kind"] == "conv" and after == 1:
            raise Discard("a conv kernel of 1 mixes no positions")
    if after == before:
        raise Discard(f"{name} already at its bound")
    base["params"][name] = after
    loc = f"{doc['regions'][i]['id']}/{j}/{base['kind']}.{name}"
    return Variation("point_substitution", doc, {"location": loc, "before": before, "after": after})


IN_FAMILY = 0.8  # share of kind substitutions drawn within the base's family


def _is_last_mixer(doc: Doc, i: int, j: int) -> bool:
    """Base j of region i is the only expressed sequence mixer of `doc`."""
    return [(m.region_index, m.base) for m in guards.mixers_of_doc(doc)] == [(i, j)]


def kind_substitution(doc: Doc, rng: random.Random, enabled: Collection[str] = ()) -> Variation:
    """Replace a gene's kind by another kind legal on the same base type (a built-in or an
    ``enabled`` plugin kind): with probability `IN_FAMILY` one of the base's family
    (`guards.family`; attention -> mla, mamba -> s4), otherwise (or when the family has no
    other legal kind) any legal kind. The last expressed sequence mixer is only replaced by
    another sequence mixer."""
    i, j = _pick_base(doc, rng)
    region = doc["regions"][i]
    base = region["bases"][j]
    kinds = [
        k
        for k in drawable(enabled)
        if base["base"] in KINDS[k].bases and region["type"] in KINDS[k].regions and k != base["kind"]
    ]
    if _is_last_mixer(doc, i, j):
        kinds = [k for k in kinds if guards.is_sequence_mixer(k)]
    if not kinds:
        raise Discard(f"no other kind for a {base['base']} base")
    kin = [k for k in kinds if guards.family(k) == guards.family(base["kind"])]
    pool = kin if kin and rng.random() < IN_FAMILY else kinds
    before = base["kind"]
    region["bases"][j] = {"base": base["base"], "kind": rng.choice(pool), "params": {}}
    return Variation(
        "kind_substitution",
        doc,
        {"location": f"{region['id']}/{j}", "before": before, "after": region["bases"][j]["kind"]},
    )


def base_insertion(doc: Doc, rng: random.Random, enabled: Collection[str] = ()) -> Variation:
    """Insert a new T or A base (a built-in or an ``enabled`` plugin kind) at a random place
    in a coding region."""
    coding = _coding(doc)
    if not coding:
        raise Discard("genome has no coding region")
    i = rng.choice(coding)
    bases = doc["regions"][i]["bases"]
    j = rng.randint(0, len(bases))
    new = random_base(rng.choice("TA"), rng, enabled=enabled)
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
    """Delete one base from a coding region that has more than one; never the last
    expressed sequence mixer."""
    spots = [
        (i, j)
        for i in _coding(doc)
        if len(doc["regions"][i]["bases"]) > 1
        for j in range(len(doc["regions"][i]["bases"]))
    ]
    if not spots:
        raise Discard("no coding region with a base to spare")
    spots = [(i, j) for i, j in spots if not _is_last_mixer(doc, i, j)]
    if not spots:
        raise Discard("the only base to spare is the last expressed sequence mixer")
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
    dup["id"] = fresh_id(doc, "c")
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


def regulatory_rewiring(doc: Doc, rng: random.Random, enabled: Collection[str] = ()) -> Variation:
    """Add, remove or flip an activates/represses edge (adding a gate region, of a built-in
    or an ``enabled`` plugin regulatory kind, if needed)."""
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
        rid = fresh_id(doc, "r")
        doc["regions"].insert(
            t, {"id": rid, "type": "regulatory", "bases": [random_base("C", rng, "regulatory", enabled)]}
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
    rid = fresh_id(doc, "r")
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
    """Change the expression of a coding region: copy count, silencing or strength (a
    promoter is added to a region without one). Every draw changes the model: a silenced
    region can only be expressed again (its copies and strength decode to nothing), and the
    region holding the last expressed sequence mixers, or the last expressed region, is
    never silenced."""
    coding = _coding(doc)
    if not coding:
        raise Discard("genome has no coding region")
    i = rng.choice(coding)
    mixers = guards.mixers_of_doc(doc)
    expressed = guards.expressed_coding(doc)
    keep = expressed == [i] or (bool(mixers) and all(m.region_index == i for m in mixers))
    if i == 0 or doc["regions"][i - 1]["type"] != "promoter":
        doc["regions"].insert(i, {"id": fresh_id(doc, "p"), "type": "promoter", "settings": {}})
        i += 1
    settings = doc["regions"][i - 1]["settings"]
    if not settings.get("expressed", PROMOTER["expressed"].default):
        names: tuple[str, ...] = ("expressed",)
    elif keep:
        names = ("copies", "copies", "strength")
    else:
        names = ("copies", "copies", "expressed", "strength")
    name = rng.choice(names)
    before = settings.get(name, PROMOTER[name].default)
    after = mutate_value(PROMOTER[name], before, rng)
    if after == before:
        raise Discard(f"promoter {name} already at its bound")
    settings[name] = after
    return Variation(
        "promoter_change",
        doc,
        {"location": f"{doc['regions'][i]['id']}.{name}", "before": before, "after": after},
    )


# Structural settings a mutation may touch; vocabulary and context belong to the task.
STRUCTURAL_MUTABLE = ("d_model", "positions", "norm", "norm_position", "tie_embeddings", "bias")


def structural_change(doc: Doc, rng: random.Random) -> Variation:
    """Change one global setting: width, positions, norm kind or placement, tying, biases.

    `d_model` moves to a neighbouring seed width (`guards.width_values`) and the whole document is
    resized with it (`genome.resize.at_width`: heads, head widths and hidden widths keep
    their share); `positions` moves to a related scheme (`guards.POSITION_NEIGHBOURS`)."""
    settings = doc["regions"][0]["settings"]
    name = rng.choice(STRUCTURAL_MUTABLE)
    before = settings.get(name, STRUCTURAL[name].default)
    if name == "d_model":
        after: Any = guards.neighbour_value(guards.width_values(), before, rng)
        doc = at_width(doc, int(after), {})
    elif name == "positions":
        after = rng.choice(guards.POSITION_NEIGHBOURS.get(before, STRUCTURAL["positions"].choices))
    else:
        after = mutate_value(STRUCTURAL[name], before, rng)
    if after == before:
        raise Discard(f"structural {name} already at its bound")
    doc["regions"][0]["settings"][name] = after
    return Variation("structural_change", doc, {"location": f"s.{name}", "before": before, "after": after})


# Mixers that carry token order by construction: a recurrence or a causal convolution reads
# its inputs in sequence, so a model with one of these first needs no position scheme.
ORDER_MIXERS = ("lstm", "gru", "rglru", "conv")


def implicit_positions(doc: Doc, rng: random.Random) -> Variation:
    """Take the model's token order from a mixer instead of a position scheme, in one move:
    `positions` becomes `none` and a new coding region of one order-carrying mixer (a kind of
    `ORDER_MIXERS`, default params: an LSTM/GRU/RG-LRU d_model wide, a conv of kernel 4) goes
    before every other region. The two halves are one operator because each alone mostly
    loses: on the default run's plateau incumbents (learned-position MLA models, quality 0.39
    -0.40) dropping the positions alone scored 0.15-0.16 and a conv region first 0.25-0.37,
    both together 0.47-0.67 (`benchmarks/two_moves.py`, docs/results.md), a valley that
    single mutations cross in none of 1,500 two- and three-step chains. A genome already
    without positions whose first expressed mixer carries order is left to other operators."""
    settings = doc["regions"][0]["settings"]
    before = settings.get("positions", STRUCTURAL["positions"].default)
    mixers = guards.mixers_of_doc(doc)
    if before == "none" and mixers and mixers[0].kind in ORDER_MIXERS:
        raise Discard("the model already takes its order from its first mixer")
    kind = rng.choice(ORDER_MIXERS)
    rid = fresh_id(doc, "c")
    doc["regions"].insert(
        1, {"id": rid, "type": "coding", "bases": [{"base": "T", "kind": kind, "params": {}}]}
    )
    settings["positions"] = "none"
    return Variation(
        "implicit_positions",
        doc,
        {"location": "s.positions", "before": before, "after": f"none + {rid}:[T:{kind}]"},
    )


MUTATIONS: dict[str, Callable[..., Variation]] = {
    "point_substitution": point_substitution,
    "kind_substitution": kind_substitution,
    "base_insertion": base_insertion,
    "base_deletion": base_deletion,
    "region_duplication": region_duplication,
    "regulatory_rewiring": regulatory_rewiring,
    "regulatory_cascade": regulatory_cascade,
    "promoter_change": promoter_change,
    "structural_change": structural_change,
    "implicit_positions": implicit_positions,
}


# The operators that draw a kind: they take the run's enabled plugin kinds.
DRAWS_KINDS = frozenset({"kind_substitution", "base_insertion", "regulatory_rewiring"})


def vary(
    op: str,
    parents: list[Genome],
    rng: random.Random,
    repair: Callable[[Doc], Doc],
    enabled: Collection[str] = (),
) -> Child:
    """Apply operator `op` to parents' documents, repair, validate and guard
    (`guards.check_child`); raise Discard with the reason if hopeless. An operator that
    draws a kind draws among the built-ins and the ``enabled`` plugin kinds."""
    docs = [copy.deepcopy(p.to_dict()) for p in parents]
    if op == "homologous_crossover":
        variation = Variation(op, *homologous_crossover(docs[0], docs[1], rng))
    elif op in DRAWS_KINDS:
        variation = MUTATIONS[op](docs[0], rng, enabled)
    else:
        variation = MUTATIONS[op](docs[0], rng)
    try:
        genome = Genome.from_dict(repair(variation.child))
    except GenomeError as e:
        raise Discard(f"{op}: unrepairable child: {e}") from None
    if genome.id == parents[0].id:
        raise Discard(f"{op}: child equals its parent")
    guards.check_child(op, [p.to_dict() for p in parents], genome.to_dict())
    return Child(genome, op, {"op": op, **variation.change})
