"""Phenotype identity: one canonical genome (and so one id) for every spelling of a model.

`genome.Genome.id` hashes the canonical YAML, which already fills in every default and
resolves every derived param; what it does not erase are representation choices that the
phenotype (`phenotype.config.model_config`) ignores:

- region labels: a region's id only names it for the edges (and the module names of the
  built model); renaming every region, and every edge end with it, builds the same model;
- a no-op promoter: a promoter whose settings are all `genome.schema.PROMOTER`'s defaults
  (`P[x1]`, expressed, strength 1) gives its coding region exactly the expression
  `Genome.promoter_of` gives a region without a promoter.

`canonical(genome)` drops the no-op promoters and renames the regions by position, in
one fixed scheme: the structural region is `s0`; the coding and regulatory regions are
numbered 1, 2, ... in order (`c<k>` coding, `r<k>` regulatory); a promoter takes the number
of the coding region it precedes (`p<k>` before `c<k>`). Every edge end is rewritten
(edges are the only references to a region: no gene param names one). The presets and
seeds are written in this scheme, so they are canonical already and keep their ids.

Region ORDER is semantics (the phenotype runs regions in order; edges point downstream)
and is never changed; edge order is kept too. `canonical` is idempotent, and
`canonical(a).id == canonical(b).id` whenever `a` and `b` differ only by the choices
above; `tests/evolution/test_identity.py` builds both phenotypes and compares them.

Stored genomes are not rewritten: a genome read back from the store keeps its stored id
(`DogmaSpace.parse` does not canonicalise); only genomes the engine births are.
"""

from __future__ import annotations

from dogma_evolve.genome import PROMOTER, Genome

DEFAULT_PROMOTER = tuple(sorted((name, spec.default) for name, spec in PROMOTER.items()))


def is_noop_promoter(settings: tuple[tuple[str, object], ...]) -> bool:
    """Whether promoter `settings` (sorted, defaults filled, as `Region.settings`) are all
    defaults: the coding region after it is expressed as if it had no promoter."""
    return tuple(sorted(settings)) == DEFAULT_PROMOTER


def relabelling(genome: Genome) -> tuple[Genome, dict[str, str]]:
    """(canonical genome, {canonical region id: region id in `genome`}) for every region
    kept (a dropped no-op promoter has no entry). See the module docstring for the scheme."""
    kept = [r for r in genome.regions if not (r.type == "promoter" and is_noop_promoter(r.settings))]
    new_id: dict[str, str] = {}
    number = 0
    for r in kept:
        if r.type == "structural":
            new_id[r.id] = "s0"
        elif r.type == "promoter":  # validation: a promoter is followed by a coding region
            new_id[r.id] = f"p{number + 1}"
        else:
            number += 1
            new_id[r.id] = f"{'c' if r.type == 'coding' else 'r'}{number}"
    doc = genome.to_dict()
    by_id = {r["id"]: r for r in doc["regions"]}
    doc["regions"] = [{**by_id[r.id], "id": new_id[r.id]} for r in kept]
    doc["edges"] = [{**e, "source": new_id[e["source"]], "target": new_id[e["target"]]} for e in doc["edges"]]
    out = Genome.from_dict(doc)
    return out, {new: old for old, new in new_id.items()}


def canonical(genome: Genome) -> Genome:
    """The canonical genome of the model `genome` builds (the same object when it is one)."""
    out, _ = relabelling(genome)
    return genome if out.id == genome.id else out


__all__ = ["DEFAULT_PROMOTER", "canonical", "is_noop_promoter", "relabelling"]
