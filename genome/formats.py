"""Genome document formats: what a kind name in a document means, by the document's `dogma`.

Two formats, marked by the document's top-level `dogma: N`:

    format 1   `tetra` = the fixed-reach TetraMemory     `tetra_mesh` = the volumetric mesh
    format 2   `tetra` = the volumetric mesh (the chapter's TetraMemory, §15.6)
               `tetra_reach` = the fixed-reach TetraMemory     `tetra_mesh` = `tetra` (alias)

Every other kind name means the same in both. Inside the program a gene's kind is the
format-2 name (`genome.KINDS`, `Gene.kind`, the phenotype's registry, `Genome.to_dict`);
a format-1 document is translated as it is read. A document without `dogma` is read as
format 2: every document the program ever stored or exported carries `dogma: 1` (the
canonical YAML always wrote it), and the documents without it are the ones code and people
write today from the names in `KINDS` (presets, seeded searches, tests).

**The canonical YAML stays format 1.** A genome's id is the sha256 of its canonical YAML,
and the store refuses a known id with a different text ("already stored with different
YAML"), so a genome stored by an earlier version must print to the same bytes it was stored
as, or resuming a run, re-committing a survivor or ablating a stored genome would fail (and
a new text would be a new id). So `Genome.to_yaml` (what is hashed, stored and exported)
writes format 1, with format 1's names: the fixed-reach TetraMemory as `tetra`, the mesh as
`tetra_mesh`. Every genome, old or new, has one canonical text and one id, the one it has
always had. `Genome.to_dict` gives the format-2 document (`dogma: 2`), the one to edit
with `KINDS` names and to write by hand; both read back to the same genome.
"""

from __future__ import annotations

FORMAT = 2
"""The current document format: what `Genome.to_dict` writes and a document without
`dogma` is read as."""

CANONICAL_FORMAT = 1
"""The format of the canonical YAML (hashed into the id, stored, exported)."""

_NAMES_READ: dict[int, dict[str, str]] = {
    1: {"tetra": "tetra_reach", "tetra_mesh": "tetra"},
    2: {"tetra_mesh": "tetra"},
}
"""Per format, the document kind names that are not the kind's own name: name -> kind."""

_NAMES_WRITTEN: dict[int, dict[str, str]] = {1: {"tetra_reach": "tetra", "tetra": "tetra_mesh"}, 2: {}}
"""Per format, the kinds written under another name: kind -> name."""

FORMATS = tuple(sorted(_NAMES_READ))


def kind_named(name: str, version: int) -> str:
    """The kind (its format-2 name) that kind name `name` means in a format-`version` document."""
    return _NAMES_READ[version].get(name, name)


def name_of(kind: str, version: int) -> str:
    """The name a format-`version` document writes kind `kind` under."""
    return _NAMES_WRITTEN[version].get(kind, kind)
