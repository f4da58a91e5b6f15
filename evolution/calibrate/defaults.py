"""The defaults and limits of `evolve calibrate`, as plain data: the study (which loads torch)
and the `evolve` parser (which must not: every command builds it) read them here."""

from __future__ import annotations

DEFAULT_STEPS = 300  # a search's full fidelity (RunConfig.steps)
FIRST_STAGE = 50  # a search's first stage (RunConfig.min_steps)
DEFAULT_RANDOM = 8  # random genomes beside the presets
MAX_RANDOM = 1_000
TARGET_FACTOR = 10  # the default target: this many times --steps
DEFAULT_PROMOTE = 0.2  # as RunConfig.promote
DEFAULT_TIMEOUT_S = 3600.0  # per training, as evolve ablate
MAX_STEPS = 10_000_000  # as RunConfig's bound on steps
MAX_RUNGS = 32


def default_rungs(steps: int) -> tuple[int, ...]:
    """The rungs when none are given: a search's first stage (50 steps), half the full
    fidelity and the full fidelity ``steps``, those below ``steps`` only, ascending:
    (50, 150, 300) for the default 300 steps."""
    return tuple(sorted({r for r in (FIRST_STAGE, steps // 2) if 0 < r < steps} | {steps}))


__all__ = [
    "DEFAULT_PROMOTE",
    "DEFAULT_RANDOM",
    "DEFAULT_STEPS",
    "DEFAULT_TIMEOUT_S",
    "FIRST_STAGE",
    "MAX_RANDOM",
    "MAX_RUNGS",
    "MAX_STEPS",
    "TARGET_FACTOR",
    "default_rungs",
]
