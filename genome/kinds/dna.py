"""Gene kind `dna` (T): the four-path DNA compute block, decoded by
`phenotype.blocks.dna.DNAConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.schema import MAX_WIDTH, KindSpec, integer, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """width 0 = d_model. depth 1 (independent reactions, all there was before the cascade)
    is left out of the canonical params, so the ids of genomes written before it hold."""
    p["width"] = p["width"] or s["d_model"]
    if p.get("depth", 1) == 1:
        p.pop("depth", None)
    return p


SPEC = register_kind(
    KindSpec(
        "dna",
        ("T",),
        {
            "width": integer(
                0, 0, MAX_WIDTH, "channels of the automaton and double-strand paths; 0 = d_model"
            ),
            "reactions": integer(8, 1, 4096, "strand-displacement reactions (path A)"),
            "d_state": integer(8, 1, 1024, "named species per automaton channel (path B)"),
            "species": integer(4, 2, 64, "states of each stochastic lane (path C)"),
            "lanes": integer(4, 1, 1024, "stochastic lanes (path C)"),
            "window": integer(4, 1, 256, "hybridisation window (path D)"),
            "depth": integer(
                1, 1, 16, "strand-displacement cascade layers (path A); 1 = independent reactions"
            ),
        },
        doc="four-path DNA compute block: strand displacement, automaton, stochastic, double "
        "strand, mixed by a regulation gate",
        derive=derive,
    )
)
