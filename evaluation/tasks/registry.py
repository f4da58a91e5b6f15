"""The built-in tasks by name (``TASKS``, ``VARIANTS``) and the functions that build, pin or
describe a task from its name (`evaluation.tasks`'s docstring)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Task
from .bytelm import ByteLM
from .compression import Compression
from .copying import SelectiveCopying
from .imported import RecordedTask
from .memorization import Memorization
from .mqar import MQAR
from .recall import FuzzyRecall, InContextRecall, NoisyRecall
from .suite import Suite
from .text import EnglishText

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
        EnglishText,
        Suite,
    )
}
# Named variants: settings that deserve a name of their own on the command line.
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    # MQAR with a large vocabulary (Zoology's harder regime): 64 keys, 256 values, 8 pairs.
    "mqar_large": ("mqar", {"num_keys": 64, "num_values": 256, "num_pairs": 8}),
    # bytelm on real English text (the KJV and Wikipedia articles that pinned packages ship,
    # split by document): the text scaling ladders default to (evaluation.tasks.corpus).
    "bytelm_en": ("bytelm", {"corpus_name": "english"}),
}


def is_builtin(name: str) -> bool:
    """Whether ``name`` names a built-in task (these win over a user's task of that name)."""
    return name in TASKS or name in VARIANTS or name.startswith("bytelm:")


def get_task(name: str, **overrides: object) -> Task:
    """The task registered as ``name`` with ``overrides`` applied to its settings.

    ``name`` may be a variant (``mqar_large``, ``bytelm_en``), ``bytelm:PATH`` (byte-level language
    modelling on the file at PATH), or a user's task (``MODULE:CLASS[?settings][#pin]`` or
    an entry-point name, `evaluation.tasks.imported`), which is imported. Raises
    ``ValueError`` for an unknown task, an unknown setting or an invalid value
    (``TaskCodeError``, one, for a user's code that cannot be imported or was changed).
    """
    if name.startswith("bytelm:"):
        name, overrides = "bytelm", {"path": name.removeprefix("bytelm:"), **overrides}
    if name in VARIANTS:
        name, defaults = VARIANTS[name]
        overrides = {**defaults, **overrides}
    if name not in TASKS:
        from . import imported

        return imported.load(name, overrides)[0]
    cls = TASKS[name]
    try:
        return cls(**overrides)
    except TypeError as error:
        raise ValueError(f"bad settings for task {name!r}: {error}") from None


def pin_tasks(
    text: str, recorded: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[str, dict[str, dict[str, Any]]]:
    """A comma list of tasks with each user task pinned: (the list with each one's canonical
    text, {canonical text: record}). Built-in names and tasks already in ``recorded`` (by
    their canonical text) are kept as they are, without importing anything; any other user
    task is imported and checked (`imported.pin`), one-line ``ValueError`` otherwise."""
    from . import imported

    names, records = [], {}
    for name in (t.strip() for t in text.split(",")):
        if not name or is_builtin(name):
            names.append(name)
        elif recorded and name in recorded:
            names.append(name)
            records[name] = dict(recorded[name])
        else:
            canonical, record = imported.pin(name)
            names.append(canonical)
            records[canonical] = record
    return ",".join(n for n in names if n), records


def task_facts(name: str, recorded: Mapping[str, Mapping[str, Any]] | None = None) -> Task:
    """The task ``name`` for its contract values (vocabulary, length, chance, batch size):
    a ``RecordedTask`` when ``recorded`` holds it (nothing imported), else ``get_task``."""
    if recorded and name in recorded:
        return RecordedTask(name, recorded[name])
    return get_task(name)


__all__ = ["TASKS", "VARIANTS", "get_task", "is_builtin", "pin_tasks", "task_facts"]
