"""The ``ladder_ranks`` table (revision 0005): the ranks of a run's Pareto elite, each taken up
a size ladder (`evolution.scale`, `evolve run --ladder`).

``LadderRankIn`` is what ``evolve run --ladder`` writes for one elite individual after the
run's last generation; :func:`put` writes a run's rows for that generation together with
the ladder's rank transfer (``transfer`` rows whose fidelities are names, e.g. ``"search"``
against ``"ladder@1000000"``) in one transaction, replacing what an earlier, interrupted
attempt wrote for the same generation, so a resumed ladder never doubles a row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from dogma_evolve.store.keys import fidelity_key
from dogma_evolve.store.models import Individual, LadderRank, Transfer
from dogma_evolve.store.records import StoreError, TransferIn


@dataclass(frozen=True)
class LadderRankIn:
    """One elite individual's ladder: its fit and extrapolated loss (``models.LadderRank``)."""

    individual_id: int
    target_params: float
    scale_run_id: str | None = None
    quality: float | None = None
    loss: float | None = None
    loss_low: float | None = None
    loss_high: float | None = None
    E: float | None = None
    A: float | None = None
    alpha: float | None = None
    alpha_low: float | None = None
    alpha_high: float | None = None
    params_low: float | None = None
    params_high: float | None = None
    rank: int | None = None
    note: str = ""


@dataclass(frozen=True)
class LadderRankRecord(LadderRankIn):
    """A stored ``LadderRankIn`` of run ``run_id``, after generation ``generation``."""

    run_id: str = ""
    generation: int = 0


_VALUES = tuple(f.name for f in fields(LadderRankIn))


def _check(rows: Sequence[LadderRankIn]) -> None:
    if len({r.individual_id for r in rows}) != len(rows):
        raise StoreError("ladder ranks: an individual is given twice")
    for r in rows:
        if not (math.isfinite(r.target_params) and r.target_params > 0):
            raise StoreError(f"ladder ranks: target_params must be positive, not {r.target_params!r}")
        for name in _VALUES:
            value = getattr(r, name)
            if isinstance(value, float) and not math.isfinite(value):
                raise StoreError(f"ladder ranks: {name} of individual {r.individual_id} is not finite")


def put(
    session: Session,
    run_id: str,
    generation: int,
    rows: Sequence[LadderRankIn],
    transfer: Sequence[TransferIn] = (),
) -> None:
    """Replace the run's ladder rows (and the ladder's named-fidelity transfer rows) of
    ``generation`` with ``rows`` and ``transfer``."""
    _check(rows)
    ids = {r.individual_id for r in rows}
    if ids:
        found = set(
            session.scalars(select(Individual.id).where(Individual.id.in_(ids), Individual.run_id == run_id))
        )
        if found != ids:
            raise StoreError(f"ladder ranks: individual {min(ids - found)} is not of run {run_id}")
    session.execute(
        delete(LadderRank).where(LadderRank.run_id == run_id, LadderRank.generation == generation)
    )
    for t in transfer:
        lower, higher = fidelity_key(t.lower_fidelity), fidelity_key(t.higher_fidelity)
        session.execute(
            delete(Transfer).where(
                Transfer.run_id == run_id,
                Transfer.generation == generation,
                Transfer.lower_fidelity == lower,
                Transfer.higher_fidelity == higher,
            )
        )
        values = {k: v for k, v in asdict(t).items() if k not in ("lower_fidelity", "higher_fidelity")}
        session.add(
            Transfer(
                run_id=run_id, generation=generation, lower_fidelity=lower, higher_fidelity=higher, **values
            )
        )
    for r in rows:
        session.add(LadderRank(run_id=run_id, generation=generation, **asdict(r)))


def read(session: Session, run_id: str) -> list[LadderRankRecord]:
    """The run's ladder rows: by generation, then rank (unranked last), then individual."""
    rows = session.scalars(select(LadderRank).where(LadderRank.run_id == run_id))
    out = [
        LadderRankRecord(
            **{name: getattr(row, name) for name in _VALUES}, run_id=row.run_id, generation=row.generation
        )
        for row in rows
    ]
    return sorted(out, key=lambda r: (r.generation, r.rank is None, r.rank or 0, r.individual_id))
