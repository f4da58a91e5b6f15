"""Natural keys and references as the store checks and stores them.

* a genome id is lowercase hex (:data:`HEX`);
* a fidelity is an int level or a name, stored as its canonical JSON so both round-trip
  (:func:`fidelity_key`);
* a reference to an individual is ``("slot", n)`` or ``("id", n)`` (:func:`checked_ref`);
* long id lists go to the database in :func:`chunks`, one ``IN (...)`` list each.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from dogma_evolve.store.models import canonical_json
from dogma_evolve.store.records import Ref, StoreError

T = TypeVar("T")
HEX = re.compile(r"[0-9a-f]+")
CHUNK = 500  # ids per IN (...) list, far below any backend's bound-parameter limit


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
