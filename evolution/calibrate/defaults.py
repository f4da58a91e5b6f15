"""The defaults and limits of `evolve calibrate`, as plain data: the study (which loads torch)
and the `evolve` parser (which must not: every command builds it) read them here. What
mirrors a search is read from `RunConfig`'s own fields (`evolution.config` loads no torch),
so a change of the search's defaults moves calibration's with it."""

from __future__ import annotations

from dataclasses import MISSING
from typing import Any

from dogma_evolve.evolution.ablate.defaults import DEFAULT_TIMEOUT_S  # per training, as evolve ablate
from dogma_evolve.evolution.config import SIZE_BOUNDS, RunConfig


def _search_default(field: str) -> Any:
    """`RunConfig`'s default of ``field`` (a plain default, never a factory)."""
    default = RunConfig.__dataclass_fields__[field].default
    if default is MISSING:
        raise TypeError(f"RunConfig.{field} has no plain default")
    return default


DEFAULT_STEPS: int = _search_default("steps")  # a search's full fidelity
FIRST_STAGE: int = _search_default("min_steps")  # a search's first stage
DEFAULT_RANDOM = 8  # random genomes beside the presets
MAX_RANDOM = 1_000
TARGET_FACTOR = 10  # the default target: this many times --steps
DEFAULT_PROMOTE: float = _search_default("promote")  # the share a first stage promotes
MAX_STEPS: int = SIZE_BOUNDS["steps"][1] or 0  # RunConfig's bound on steps
MAX_RUNGS = 32


def default_rungs(steps: int) -> tuple[int, ...]:
    """The rungs when none are given: a search's first stage (`FIRST_STAGE`), half the full
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
