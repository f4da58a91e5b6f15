"""The one-line sequence view of a genome, for people.

    S[d=256 V=64 pos=rope norm=rmsnorm] P[x2] C[T:attention(heads=4) A:swiglu] R[C:gate] | r3>c2:activates

Regions appear in order as S (structural), P (promoter), C (coding), R (regulatory); every
base is written `TYPE:kind(params)` with only the params that differ from their defaults;
edges follow a bar. A regulatory region in a hierarchy (an `activates`/`represses` edge
joins it to another regulatory region) is labelled with its id, so that the edges can be
read against the regions:

    S[...] r1=R[C:gate] r2=R[C:gate(hidden=8)] C[A:swiglu] | r1>r2:represses r2>c3:activates

The view is lossy on purpose: the YAML is the canonical form.
"""

from __future__ import annotations

from typing import Any

from dogma_evolve.genome.core import Genome
from dogma_evolve.genome.schema import KINDS, PROMOTER, STRUCTURAL

_STRUCTURAL_SHORT = {"d_model": "d", "vocab": "V", "positions": "pos", "norm": "norm"}


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _in_hierarchy(genome: Genome) -> set[str]:
    """Ids of the regulatory regions that an edge joins to another regulatory region."""
    regulatory = {r.id for r in genome.regions if r.type == "regulatory"}
    return {
        end
        for e in genome.edges
        if e.source in regulatory and e.target in regulatory
        for end in (e.source, e.target)
    }


def sequence_view(genome: Genome) -> str:
    parts: list[str] = []
    labelled = _in_hierarchy(genome)
    for r in genome.regions:
        s = r.settings_dict
        if r.type == "structural":
            items = [f"{short}={_fmt(s[k])}" for k, short in _STRUCTURAL_SHORT.items()]
            items += [
                f"{k}={_fmt(v)}"
                for k, v in sorted(s.items())
                if k not in _STRUCTURAL_SHORT and v != STRUCTURAL[k].default
            ]
            parts.append(f"S[{' '.join(items)}]")
        elif r.type == "promoter":
            items = [f"x{s['copies']}"]
            items += [
                f"{k}={_fmt(v)}" for k, v in sorted(s.items()) if k != "copies" and v != PROMOTER[k].default
            ]
            parts.append(f"P[{' '.join(items)}]")
        else:
            bases = []
            for b in r.bases:
                spec = KINDS[b.gene.kind].params
                shown = [f"{k}={_fmt(v)}" for k, v in b.gene.params if v != spec[k].default]
                bases.append(f"{b.type}:{b.gene.kind}" + (f"({','.join(shown)})" if shown else ""))
            label = f"{r.id}=" if r.id in labelled else ""
            parts.append(f"{label}{'C' if r.type == 'coding' else 'R'}[{' '.join(bases)}]")
    view = " ".join(parts)
    if genome.edges:
        view += " | " + " ".join(f"{e.source}>{e.target}:{e.kind}" for e in genome.edges)
    return view
