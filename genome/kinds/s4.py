"""Gene kind `s4` (T): S4D diagonal state space, decoded by `dogma_evolve.phenotype.blocks.s4.S4Config`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome.schema import KindSpec, choice, integer, register_kind


def derive(p: dict[str, Any], s: Mapping[str, Any]) -> dict[str, Any]:
    """d_state even: the real state dimensions are complex-conjugate pairs."""
    if p["d_state"] % 2:
        raise ValueError(f"d_state must be even (complex-conjugate pairs), got {p['d_state']}")
    return p


SPEC = register_kind(
    KindSpec(
        "s4",
        ("T",),
        {
            "d_state": integer(16, 2, 4096, "real state dimensions per channel (even: complex pairs)"),
            "init": choice("legs", "legs", "lin", doc="S4D-LegS (HiPPO) or S4D-Lin eigenvalues"),
        },
        doc="S4D diagonal state space: FFT convolution in training, recurrence at inference",
        derive=derive,
    )
)
