"""Synthetic evaluation tasks, generated locally from a seed (nothing is downloaded).

``get_task(name, **overrides)`` builds a registered task with its defaults replaced by
``overrides``; ``TASKS`` maps each name to its class.
"""

from __future__ import annotations

from .base import IGNORE_INDEX, Task, derive_seed
from .bytelm import ByteLM
from .compression import Compression
from .copying import SelectiveCopying
from .memorization import Memorization
from .mqar import MQAR
from .recall import FuzzyRecall, InContextRecall, NoisyRecall
from .suite import Suite

TASKS: dict[str, type[Task]] = {
    cls.name: cls
    for cls in (
        MQAR,
        InContextRecall,
        NoisyRecall,
        FuzzyRecall,
        SelectiveCopying,
        Memorization,
        Compression,
        ByteLM,
        Suite,
    )
}
# Named variants: settings that deserve a name of their own on the command line.
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    # MQAR with a large vocabulary (Zoology's harder regime): 64 keys, 256 values, 8 pairs.
    "mqar_large": ("mqar", {"num_keys": 64, "num_values": 256, "num_pairs": 8}),
}


def get_task(name: str, **overrides: object) -> Task:
    """The task registered as ``name`` with ``overrides`` applied to its settings.

    ``name`` may be a variant (``mqar_large``) or ``bytelm:PATH`` (byte-level language
    modelling on the file at PATH). Raises ``ValueError`` for an unknown task, an unknown
    setting or an invalid value.
    """
    if name.startswith("bytelm:"):
        name, overrides = "bytelm", {"path": name.removeprefix("bytelm:"), **overrides}
    if name in VARIANTS:
        name, defaults = VARIANTS[name]
        overrides = {**defaults, **overrides}
    try:
        cls = TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(sorted(TASKS))}") from None
    try:
        return cls(**overrides)
    except TypeError as error:
        raise ValueError(f"bad settings for task {name!r}: {error}") from None


__all__ = [
    "IGNORE_INDEX",
    "MQAR",
    "VARIANTS",
    "ByteLM",
    "Compression",
    "TASKS",
    "FuzzyRecall",
    "InContextRecall",
    "Memorization",
    "NoisyRecall",
    "SelectiveCopying",
    "Suite",
    "Task",
    "derive_seed",
    "get_task",
]
