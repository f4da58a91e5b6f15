"""Gene kind `tetra` (A or T): the volumetric TetraMemory, the DOGMA chapter's (§15.6),
decoded by `phenotype.blocks.tetra_mesh.TetraMeshConfig`.

Genome format 1 (`genome.formats`) names this kind `tetra_mesh`, and format 2 still reads
that name as this kind; format 1's `tetra` is the fixed-reach `tetra_reach`.

The mesh geometry (a lattice of side L = ⌈max_len^{1/3}⌉) and the number of propagation
rounds depend on the structural `max_len`; they are not params, so a genome keeps its id
when its context is pinned to another length. The block module repeats the two formulas
below (an exported package carries no `genome`); tests/phenotype/test_tetra_mesh.py checks
that both agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.schema import KindSpec, integer, real, register_kind

# Steps per unit of lattice distance that k bonds need: with only the three axis bonds a
# displacement (a, b, c) costs a + b + c steps, with a diagonal at most 2·max(a, b, c),
# with the whole causal cube (k = 8, the Freudenthal triangulation) max(a, b, c).
STEP_FACTOR = {4: 3, 5: 2, 6: 2, 7: 2, 8: 1}


def mesh_side(max_len: int) -> int:
    """L = ⌈max_len^{1/3}⌉, in integers: the smallest L with L³ ≥ max_len."""
    side = max(1, round(max_len ** (1 / 3)))
    while side**3 < max_len:
        side += 1
    while side > 1 and (side - 1) ** 3 >= max_len:
        side -= 1
    return side


def cover_rounds(neighbours: int, scales: int, max_len: int) -> int:
    """Rounds after which every token has heard from its whole prefix (< max_len tokens):
    f_k · (⌊(L-1) / 2^{S-1}⌋ + S - 1), at least 1. A displacement's lattice coordinates,
    each < L, are written in steps of 2^{S-1} plus one binary digit per finer scale."""
    side = mesh_side(max_len)
    return max(1, STEP_FACTOR[neighbours] * ((side - 1) // 2 ** (scales - 1) + scales - 1))


def propagation_rounds(neighbours: int, scales: int, reach: float, max_len: int) -> int:
    """⌈reach · max_len^{1/3}⌉ rounds, or the least that cover the prefix when reach = 0."""
    if reach == 0:
        return cover_rounds(neighbours, scales, max_len)
    return max(1, math.ceil(reach * max_len ** (1 / 3) - 1e-9))


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """reach 0 stays 0 ("just enough rounds"), so the canonical form does not depend on
    max_len; a positive reach must give at least the rounds that cover the prefix."""
    need = cover_rounds(p["neighbours"], p["scales"], s["max_len"])
    got = propagation_rounds(p["neighbours"], p["scales"], p["reach"], s["max_len"])
    if got < need:
        raise ValueError(
            f"reach {p['reach']:g} gives {got} rounds; a {s['max_len']}-token prefix needs "
            f"{need} with neighbours={p['neighbours']}, scales={p['scales']}"
        )
    if got > 4096:
        raise ValueError(f"reach {p['reach']:g} gives {got} propagation rounds (at most 4096)")
    return p


SPEC = register_kind(
    KindSpec(
        "tetra",
        ("A", "T"),
        {
            "neighbours": integer(8, 4, 8, "bonded sites per site, itself included (8: the causal cube)"),
            "scales": integer(2, 1, 4, "mesh scales: bonds and pooled sites at spacing 1, 2, 4, ..."),
            "reach": real(0.0, 0.0, 64.0, "rounds = ⌈reach·max_len^{1/3}⌉; 0 = the least that cover"),
        },
        doc="volumetric TetraMemory: tokens on a causal 3-D tetrahedral mesh, O(T·k·d) per round, "
        "O(T^{1/3}) rounds",
        derive=derive,
    )
)
