"""Synthetic evaluation tasks, generated locally from a seed (nothing is downloaded).

``get_task(name, **overrides)`` builds a registered task with its defaults replaced by
``overrides``; ``TASKS`` maps each name to its class. A user's own task (``MODULE:CLASS``,
an entry point of ``dogma_evolve.tasks``) is imported by ``get_task`` too, and pinned
(canonical text, fingerprint of its code, record) by ``pin_tasks``; ``task_facts`` gives a
recorded one without importing it (`evaluation.tasks.imported`).

Names are imported on first use (PEP 562, `evaluation.lazy`): the contract and the seeds
(``Task``, ``derive_seed``: `base`) load no torch, so a reader of a store (`evolve report`) that
derives a seed does not load a task's code; ``TASKS`` and the functions of `registry` load every
built-in task.
"""

from typing import TYPE_CHECKING

from dogma_evolve.evaluation.lazy import install

if TYPE_CHECKING:  # the names as type checkers see them; at run time, __getattr__
    from .base import IGNORE_INDEX, Task, derive_seed
    from .bytelm import ByteLM
    from .compression import Compression
    from .copying import SelectiveCopying
    from .imported import ENTRY_POINT_GROUP, RecordedTask, TaskCodeError
    from .memorization import Memorization
    from .mqar import MQAR
    from .recall import FuzzyRecall, InContextRecall, NoisyRecall
    from .registry import TASKS, VARIANTS, get_task, is_builtin, pin_tasks, task_facts
    from .suite import Suite
    from .text import EnglishText

_PUBLIC = {
    "ByteLM": "dogma_evolve.evaluation.tasks.bytelm",
    "Compression": "dogma_evolve.evaluation.tasks.compression",
    "ENTRY_POINT_GROUP": "dogma_evolve.evaluation.tasks.imported",
    "EnglishText": "dogma_evolve.evaluation.tasks.text",
    "FuzzyRecall": "dogma_evolve.evaluation.tasks.recall",
    "IGNORE_INDEX": "dogma_evolve.evaluation.tasks.base",
    "InContextRecall": "dogma_evolve.evaluation.tasks.recall",
    "MQAR": "dogma_evolve.evaluation.tasks.mqar",
    "Memorization": "dogma_evolve.evaluation.tasks.memorization",
    "NoisyRecall": "dogma_evolve.evaluation.tasks.recall",
    "RecordedTask": "dogma_evolve.evaluation.tasks.imported",
    "SelectiveCopying": "dogma_evolve.evaluation.tasks.copying",
    "Suite": "dogma_evolve.evaluation.tasks.suite",
    "TASKS": "dogma_evolve.evaluation.tasks.registry",
    "Task": "dogma_evolve.evaluation.tasks.base",
    "TaskCodeError": "dogma_evolve.evaluation.tasks.imported",
    "VARIANTS": "dogma_evolve.evaluation.tasks.registry",
    "derive_seed": "dogma_evolve.evaluation.tasks.base",
    "get_task": "dogma_evolve.evaluation.tasks.registry",
    "is_builtin": "dogma_evolve.evaluation.tasks.registry",
    "pin_tasks": "dogma_evolve.evaluation.tasks.registry",
    "task_facts": "dogma_evolve.evaluation.tasks.registry",
}
__getattr__ = install(__name__, _PUBLIC)

__all__ = [
    "ENTRY_POINT_GROUP",
    "IGNORE_INDEX",
    "MQAR",
    "VARIANTS",
    "ByteLM",
    "EnglishText",
    "Compression",
    "TASKS",
    "FuzzyRecall",
    "InContextRecall",
    "Memorization",
    "NoisyRecall",
    "RecordedTask",
    "SelectiveCopying",
    "Suite",
    "Task",
    "TaskCodeError",
    "derive_seed",
    "get_task",
    "is_builtin",
    "pin_tasks",
    "task_facts",
]
