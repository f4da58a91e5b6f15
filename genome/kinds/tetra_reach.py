"""Gene kind `tetra_reach` (A or T): the fixed-reach TetraMemory, decoded by
`phenotype.blocks.memory.TetraReachConfig`.

Token t is bonded to t-1..t-window and to t - stride^j, j = 1..levels; R = `rounds` rounds
of message passing reach at most R·max(window, stride^levels) tokens back, whatever the
context. Genome format 1 (`genome.formats`) names this kind `tetra`, which format 2 gives
to the volumetric mesh (`genome.kinds.tetra`), the chapter's TetraMemory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.schema import KindSpec, integer, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """A mesh node needs a neighbour; faces may reach at most 2^16 tokens back."""
    if p["window"] + p["levels"] == 0:
        raise ValueError("a mesh node needs a neighbour: window or levels must be positive")
    if p["stride"] ** p["levels"] > 1 << 16:
        raise ValueError(f"stride^levels = {p['stride']}^{p['levels']} reaches too far back")
    return p


SPEC = register_kind(
    KindSpec(
        "tetra_reach",
        ("A", "T"),
        {
            "window": integer(2, 0, 64, "local neighbours t-1..t-window"),
            "stride": integer(4, 2, 1024, "face neighbours at t - stride^j"),
            "levels": integer(2, 0, 8, "face levels j = 1..levels"),
            "rounds": integer(2, 1, 16, "message-passing rounds"),
        },
        doc="fixed-reach TetraMemory: message passing over local and strided bonds, O(T·k·d), "
        "reach rounds·stride^levels (format 1's `tetra`)",
        derive=derive,
    )
)
