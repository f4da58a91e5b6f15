"""The refusals of the scaling-law analysis, as plain Python (no numpy, no scipy): the error
every refusal is, and the bootstrap's least replicate count. The `evolve scale` parser and
the ladders (`evolution.scale.ladder`) read them without loading the fitting code."""

from __future__ import annotations

import math


class LadderError(ValueError):
    """A ladder (a set of runs across sizes) that cannot determine the fit; the message is
    one line that says what is missing."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


def min_boot(confidence: float) -> int:
    """The fewest replicates for a percentile interval: 5 replicates in each tail."""
    return math.ceil(10.0 / (1.0 - confidence) - 1e-9)


def check_boot(n_boot: int, confidence: float) -> None:
    """Refuse a confidence outside [0.5, 1) or fewer than ``min_boot`` replicates."""
    if not 0.5 <= confidence < 1.0:
        raise LadderError(f"confidence {confidence} is outside [0.5, 1)")
    if n_boot < min_boot(confidence):
        raise LadderError(
            f"n_boot {n_boot} is too few for a {confidence:.0%} interval: need at least "
            f"{min_boot(confidence)} (5 replicates in each tail)"
        )


__all__ = ["LadderError", "check_boot", "min_boot"]
