"""Natural keys and references as the store checks and stores them.

* an evaluation's natural key within its run is ``(genome id, task, fidelity, seed)``
  (:class:`EvalKey`), read off anything that carries one by :func:`natural_key` (a request
  or result of the pool, a lease, an evaluation to commit or a stored one, a point of a
  training run), and compared as stored by :func:`stored_key` (the fidelity's text): with
  the run, what the ``evaluations`` table's UNIQUE constraint holds;
* a genome id is lowercase hex (:data:`HEX`);
* a fidelity is an int level or a name, stored as its canonical JSON so both round-trip
  (:func:`fidelity_key`);
* a reference to an individual is ``("slot", n)`` or ``("id", n)`` (:func:`checked_ref`);
* long id lists go to the database in :func:`chunks`, one ``IN (...)`` list each.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

from dogma_evolve.store.models import canonical_json
from dogma_evolve.store.records import Ref, StoreError

T = TypeVar("T")
HEX = re.compile(r"[0-9a-f]+")
CHUNK = 500  # ids per IN (...) list, far below any backend's bound-parameter limit


class EvalKey(NamedTuple):
    """The natural key of an evaluation within its run (module docstring)."""

    genome_id: str
    task: str
    fidelity: Any  # an int level (training steps) or a name
    seed: int


StoredKey = tuple[str, str, str, int]  # an EvalKey with its fidelity as stored


def natural_key(evaluation: Any) -> EvalKey:
    """The natural key of ``evaluation``: anything with ``genome_id``, ``task``, ``fidelity``
    and ``seed``."""
    return EvalKey(evaluation.genome_id, evaluation.task, evaluation.fidelity, evaluation.seed)


def stored_key(evaluation: Any) -> StoredKey:
    """:func:`natural_key` with the fidelity as the store holds it (:func:`fidelity_key`), so
    1 and a level read back as 1 are one key; a bad fidelity is refused (``StoreError``)."""
    genome_id, task, fidelity, seed = natural_key(evaluation)
    return (genome_id, task, fidelity_key(fidelity), seed)


def chunks(values: Sequence[T]) -> Iterator[Sequence[T]]:
    """``values`` in slices of at most :data:`CHUNK`."""
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


def checked_ref(value: Any, what: str) -> Ref:
    """Normalise ("slot", n) / ("id", n) (lists from JSON too); anything else is refused."""
    if isinstance(value, (tuple, list)) and len(value) == 2 and value[0] in ("slot", "id"):
        kind, number = value
        if isinstance(number, int) and not isinstance(number, bool):
            return (kind, number)
    raise StoreError(f"{what}: {value!r} is not a reference ('slot', n) or ('id', n)")


def fidelity_key(fidelity: Any) -> str:
    """The stored text of a fidelity; anything but an int level or a name is refused."""
    if isinstance(fidelity, bool) or not isinstance(fidelity, (int, str)):
        raise StoreError(f"fidelity must be an int level or a name, not {fidelity!r}")
    return canonical_json(fidelity)
