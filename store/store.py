"""The run store: runs, genomes, births, evaluations, lineage, policy, archive, weights.

One writer per run (the driver) commits each generation in one transaction with
:meth:`Store.commit_generation`; a killed run resumes from ``last_generation`` with nothing
lost and, because every row has a natural key, nothing doubled when a commit is retried.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import func, insert, inspect, select, text
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from store.engine import Engines, describe, open_engines
from store.models import (
    EVALUATION_STATUSES,
    LEASE_STATES,
    RUN_STATUSES,
    SCHEMA_VERSION,
    Archive,
    Artifact,
    Base,
    Evaluation,
    Genome,
    Individual,
    Lease,
    Lineage,
    Member,
    Policy,
    Run,
    SchemaVersion,
    canonical_json,
    utcnow,
)
from store.records import (
    AncestryStep,
    ArchiveIn,
    ArchiveRecord,
    EvaluationIn,
    EvaluationRecord,
    GenomeIn,
    IndividualIn,
    IndividualRecord,
    LeaseIn,
    LeaseRecord,
    LineageIn,
    ParentEdge,
    PolicyIn,
    PolicyRecord,
    Ref,
    RunRecord,
    StoreError,
)

T = TypeVar("T")
_HEX = re.compile(r"[0-9a-f]+")
_CHUNK = 500  # ids per IN (...) list, far below any backend's bound-parameter limit
_WRITE_ATTEMPTS = 5
# Any 64-bit constant: the PostgreSQL advisory lock that serialises schema creation.
_SCHEMA_LOCK_KEY = int.from_bytes(hashlib.sha256(b"dogma-evolve schema").digest()[:8], "big") >> 1
# PostgreSQL errors after which the whole transaction may simply run again:
# serialization_failure, deadlock_detected, lock_not_available.
_RETRY_SQLSTATES = {"40001", "40P01", "55P03"}
_DAMAGED = ("malformed", "not a database")


def _one_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    message = str(orig if orig is not None else exc).strip()
    line = message.splitlines()[0] if message else type(exc).__name__
    if any(word in line.lower() for word in _DAMAGED):
        line += " (the store file is damaged; it was left as it is)"
    return line


def _is_busy(exc: DBAPIError) -> bool:
    if getattr(exc.orig, "sqlstate", None) in _RETRY_SQLSTATES:
        return True
    message = str(exc.orig).lower()
    return isinstance(exc, OperationalError) and ("locked" in message or "busy" in message)


def _chunks(values: Sequence[T]) -> Iterator[Sequence[T]]:
    for start in range(0, len(values), _CHUNK):
        yield values[start : start + _CHUNK]


def _ref(value: Any, what: str) -> Ref:
    """Normalise ("slot", n) / ("id", n) (lists from JSON too); anything else is refused."""
    if isinstance(value, (tuple, list)) and len(value) == 2 and value[0] in ("slot", "id"):
        kind, number = value
        if isinstance(number, int) and not isinstance(number, bool):
            return (kind, number)
    raise StoreError(f"{what}: {value!r} is not a reference ('slot', n) or ('id', n)")


def _check_safetensors(data: bytes) -> None:
    """Cheap structural check: 8-byte little-endian header length, then a JSON object."""
    if len(data) < 8:
        raise StoreError("artifact is not safetensors: shorter than its 8-byte header length")
    header_length = int.from_bytes(data[:8], "little")
    if header_length < 2 or 8 + header_length > len(data):
        raise StoreError("artifact is not safetensors: header length out of range")
    try:
        header = json.loads(data[8 : 8 + header_length])
    except ValueError as exc:
        raise StoreError(f"artifact is not safetensors: header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise StoreError("artifact is not safetensors: header is not a JSON object")


def _fidelity_key(fidelity: Any) -> str:
    if isinstance(fidelity, bool) or not isinstance(fidelity, (int, str)):
        raise StoreError(f"fidelity must be an int level or a name, not {fidelity!r}")
    return canonical_json(fidelity)


def _evaluation_record(row: Evaluation) -> EvaluationRecord:
    return EvaluationRecord(
        id=row.id,
        run_id=row.run_id,
        genome_id=row.genome_id,
        task=row.task,
        fidelity=json.loads(row.fidelity),
        seed=row.seed,
        individual_id=row.individual_id,
        status=row.status,
        reason=row.reason,
        metrics=row.metrics,
        wall_seconds=row.wall_seconds,
        created=row.created,
    )


class Store:
    """Persistent record of evolutionary runs (SQLite file by default, any SQLAlchemy URL).

    Use as a context manager or call :meth:`close`. Every method returns plain values
    (dataclasses from :mod:`store.records`) and raises :class:`StoreError` on refusal or
    database failure, with a one-line message.
    """

    def __init__(self, url: str = "sqlite:///evolve.db", *, busy_timeout: float = 30.0) -> None:
        self.url = url
        try:
            self._engines: Engines | None = open_engines(url, busy_timeout)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open {describe(url)}: {_one_line(exc)}") from exc
        try:
            self._create_schema()
        except StoreError as exc:
            self.close()
            raise StoreError(f"cannot open {describe(url)}: {exc}") from exc

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        if self._engines is not None:
            self._engines.dispose()
            self._engines = None

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _schema_version(self, session: Session) -> int | None:
        """The stored schema version; None when the schema is not (completely) there."""
        connection = session.connection()
        names = set(inspect(connection).get_table_names())
        if not names:
            return None
        if SchemaVersion.__tablename__ not in names:
            return 1 if "runs" in names else None  # stores written before the version table
        version = session.scalar(select(SchemaVersion.version).where(SchemaVersion.id == 1))
        if version is None or not set(Base.metadata.tables) <= names:
            return None
        return int(version)

    def _create_schema(self) -> None:
        """Create missing tables once, safely when several processes open an empty store.

        The common case (the schema is there) is a read, so opening a store in use by a
        running driver takes no write lock. Otherwise tables and the version row are made
        in one write transaction, serialised by BEGIN IMMEDIATE on SQLite and by a
        transaction-scoped advisory lock on PostgreSQL (its DDL is transactional, so a
        second process waits, then finds everything and creates nothing).
        """

        def check(version: int | None) -> bool:
            if version is not None and version > SCHEMA_VERSION:
                raise StoreError(
                    f"the store has schema version {version}, newer than this program's "
                    f"{SCHEMA_VERSION}; upgrade dogma-evolve to use it"
                )
            return version == SCHEMA_VERSION

        if check(self._read(self._schema_version, "reading the schema version")):
            return

        def create(session: Session) -> None:
            connection = session.connection()
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
            if check(self._schema_version(session)):
                return  # another process created it while we waited for the lock
            Base.metadata.create_all(connection)
            row = session.get(SchemaVersion, 1)
            if row is None:
                session.add(SchemaVersion(id=1, version=SCHEMA_VERSION))
            else:
                row.version = SCHEMA_VERSION

        self._write(create, "creating tables")

    def _live(self) -> Engines:
        if self._engines is None:
            raise StoreError("store is closed")
        return self._engines

    def _write(self, work: Callable[[Session], T], what: str) -> T:
        """Run ``work`` in one write transaction (BEGIN IMMEDIATE on SQLite).

        The busy timeout makes SQLite wait for the lock; should it still report the
        database busy, the whole transaction is run again (the work is idempotent).
        """
        engine = self._live().write
        for attempt in range(_WRITE_ATTEMPTS):
            try:
                with Session(engine, expire_on_commit=False) as session:
                    with session.begin():
                        return work(session)
            except DBAPIError as exc:
                if _is_busy(exc) and attempt + 1 < _WRITE_ATTEMPTS:
                    time.sleep(0.1 * (attempt + 1))
                    continue
                raise StoreError(f"{what}: {_one_line(exc)}") from exc
            except SQLAlchemyError as exc:
                raise StoreError(f"{what}: {_one_line(exc)}") from exc
        raise AssertionError("unreachable")

    def _read(self, work: Callable[[Session], T], what: str) -> T:
        """Run ``work`` in one read transaction: one consistent snapshot, no write lock."""
        try:
            with Session(self._live().read) as session:
                with session.begin():
                    return work(session)
        except SQLAlchemyError as exc:
            raise StoreError(f"{what}: {_one_line(exc)}") from exc

    # -- runs ------------------------------------------------------------------------------

    def create_run(self, config: dict[str, Any], seed: int, task: str) -> str:
        """Record a new run (status 'running', nothing committed) and return its id."""
        run_id = uuid.uuid4().hex[:12]

        def work(session: Session) -> str:
            session.add(Run(id=run_id, config=config, seed=seed, task=task))
            return run_id

        return self._write(work, "create_run")

    def get_run(self, run_id: str) -> RunRecord | None:
        def work(session: Session) -> RunRecord | None:
            run = session.get(Run, run_id)
            if run is None:
                return None
            return self._run_record(session, run, self._evaluated(session, [run_id]))

        return self._read(work, "get_run")

    def list_runs(self) -> list[RunRecord]:
        """All runs, oldest first."""

        def work(session: Session) -> list[RunRecord]:
            runs = session.scalars(select(Run).order_by(Run.created, Run.id)).all()
            counts = self._evaluated(session, None)
            return [self._run_record(session, run, counts) for run in runs]

        return self._read(work, "list_runs")

    def set_run_status(self, run_id: str, status: str) -> None:
        if status not in RUN_STATUSES:
            raise StoreError(f"run status must be one of {RUN_STATUSES}, not {status!r}")

        def work(session: Session) -> None:
            run = session.get(Run, run_id)
            if run is None:
                raise StoreError(f"no run {run_id!r}")
            run.status = status

        self._write(work, "set_run_status")

    @staticmethod
    def _evaluated(session: Session, run_ids: list[str] | None) -> dict[str, int]:
        query = select(Evaluation.run_id, func.count()).group_by(Evaluation.run_id)
        if run_ids is not None:
            query = query.where(Evaluation.run_id.in_(run_ids))
        return {run_id: count for run_id, count in session.execute(query)}

    @staticmethod
    def _run_record(session: Session, run: Run, evaluated: dict[str, int]) -> RunRecord:
        return RunRecord(
            id=run.id,
            status=run.status,
            created=run.created,
            seed=run.seed,
            task=run.task,
            config=run.config,
            last_generation=run.last_generation,
            generations=run.last_generation + 1,
            evaluated=evaluated.get(run.id, 0),
        )

    # -- committing a generation -----------------------------------------------------------

    def commit_generation(
        self,
        run_id: str,
        generation: int,
        *,
        genomes: Iterable[GenomeIn | tuple[str, str, str]] = (),
        individuals: Iterable[IndividualIn] = (),
        evaluations: Iterable[EvaluationIn] = (),
        lineage: Iterable[LineageIn] = (),
        members: Iterable[Ref] = (),
        policy: Iterable[PolicyIn] = (),
        archive: Iterable[ArchiveIn] = (),
        archive_remove: Iterable[str] = (),
    ) -> dict[int, int]:
        """Store generation ``generation`` of a run in one transaction; return slot → id.

        ``genomes`` are inserted if absent; ``individuals`` are the births of this
        generation; ``evaluations`` are inserted if their natural key is absent;
        ``lineage`` edges link a child (by slot) to a parent (by slot or id); ``members``
        is the population after this generation, in order (survivors of earlier
        generations by id). ``policy`` and ``archive`` rows are upserted by their keys
        (absolute values; rows not given are kept, so passing only what changed loses
        nothing); ``archive_remove`` names genome ids that leave the archive.
        ``runs.last_generation`` becomes ``generation``.

        Generations are committed in order: ``generation`` must be last_generation + 1.
        Committing a generation that is already stored (a retry after a lost
        acknowledgement) changes nothing and returns the stored ids when the births,
        lineage, members and evaluation keys match, and raises :class:`StoreError`
        otherwise, so the generation counter never goes back.
        """
        payload = _Payload.build(
            genomes, individuals, evaluations, lineage, members, policy, archive, archive_remove
        )

        def work(session: Session) -> dict[int, int]:
            run = session.get(Run, run_id, with_for_update=True)
            if run is None:
                raise StoreError(f"no run {run_id!r}")
            if generation <= run.last_generation:
                return payload.verify_stored(session, run_id, generation)
            if generation != run.last_generation + 1:
                raise StoreError(
                    f"run {run_id}: generation {generation} would skip generations after "
                    f"the last committed one, {run.last_generation}"
                )
            slot_ids = payload.insert(session, run_id, generation)
            run.last_generation = generation
            return slot_ids

        return self._write(work, f"commit_generation {generation} of run {run_id}")

    # -- reading individuals ---------------------------------------------------------------

    def find_evaluation(
        self,
        genome_id: str,
        task: str,
        fidelity: int | str,
        seed: int,
        run_id: str | None = None,
    ) -> EvaluationRecord | None:
        """The evaluation cache: a stored result for this key, in ``run_id`` or any run.

        Across runs the oldest matching row wins, so repeated look-ups agree.
        """
        key = _fidelity_key(fidelity)

        def work(session: Session) -> EvaluationRecord | None:
            query = select(Evaluation).where(
                Evaluation.genome_id == genome_id,
                Evaluation.task == task,
                Evaluation.fidelity == key,
                Evaluation.seed == seed,
            )
            if run_id is not None:
                query = query.where(Evaluation.run_id == run_id)
            row = session.scalars(query.order_by(Evaluation.id).limit(1)).first()
            return None if row is None else _evaluation_record(row)

        return self._read(work, "find_evaluation")

    def population(self, run_id: str, generation: int | None = None) -> list[IndividualRecord]:
        """Members of a generation (default: the last committed one) in stored order."""

        def work(session: Session) -> list[IndividualRecord]:
            run = session.get(Run, run_id)
            if run is None:
                raise StoreError(f"no run {run_id!r}")
            wanted = run.last_generation if generation is None else generation
            if wanted < 0:
                return []
            rows = session.scalars(
                select(Individual)
                .join(Member, Member.individual_id == Individual.id)
                .where(Member.run_id == run_id, Member.generation == wanted)
                .order_by(Member.rank)
            ).all()
            return _individual_records(session, list(rows))

        return self._read(work, "population")

    def individual(self, individual_id: int) -> IndividualRecord | None:
        def work(session: Session) -> IndividualRecord | None:
            row = session.get(Individual, individual_id)
            return None if row is None else _individual_records(session, [row])[0]

        return self._read(work, "individual")

    def individuals(self, run_id: str) -> list[IndividualRecord]:
        """Every birth of a run, by generation and slot, with evaluations (reports, fronts)."""

        def work(session: Session) -> list[IndividualRecord]:
            rows = session.scalars(
                select(Individual)
                .where(Individual.run_id == run_id)
                .order_by(Individual.generation, Individual.slot)
            ).all()
            return _individual_records(session, list(rows), run_id=run_id)

        return self._read(work, "individuals")

    def find_individuals_by_genome_prefix(
        self, prefix: str, run_id: str | None = None
    ) -> list[IndividualRecord]:
        """Births whose genome id starts with ``prefix`` (hex, as a user types it)."""
        prefix = prefix.strip().lower()
        if not _HEX.fullmatch(prefix):
            raise StoreError(f"genome id prefix must be hexadecimal, not {prefix!r}")

        def work(session: Session) -> list[IndividualRecord]:
            query = select(Individual).where(Individual.genome_id.startswith(prefix))
            if run_id is not None:
                query = query.where(Individual.run_id == run_id)
            rows = session.scalars(query.order_by(Individual.id)).all()
            return _individual_records(session, list(rows))

        return self._read(work, "find_individuals_by_genome_prefix")

    def ancestry(self, individual_id: int) -> list[AncestryStep]:
        """The individual and its ancestors back to the seeds, breadth first.

        Every ancestor appears once (shared ancestors of a crossover too); a cycle in
        damaged data ends the walk instead of looping.
        """

        def work(session: Session) -> list[AncestryStep]:
            if session.get(Individual, individual_id) is None:
                raise StoreError(f"no individual {individual_id}")
            steps: list[AncestryStep] = []
            seen = {individual_id}
            frontier = [individual_id]
            depth = 0
            while frontier:
                births: dict[int, Individual] = {}
                edges: dict[int, list[Lineage]] = defaultdict(list)
                for chunk in _chunks(frontier):
                    for row in session.scalars(select(Individual).where(Individual.id.in_(chunk))):
                        births[row.id] = row
                    edge_query = select(Lineage).where(Lineage.child_id.in_(chunk)).order_by(Lineage.id)
                    for edge in session.scalars(edge_query):
                        edges[edge.child_id].append(edge)
                following: list[int] = []
                for ident in frontier:
                    birth = births.get(ident)
                    if birth is None:
                        continue  # dangling parent id in damaged data
                    steps.append(
                        AncestryStep(
                            individual_id=birth.id,
                            depth=depth,
                            run_id=birth.run_id,
                            generation=birth.generation,
                            slot=birth.slot,
                            genome_id=birth.genome_id,
                            operator=birth.operator,
                            change=birth.change,
                            parents=[ParentEdge(e.parent_id, e.operator, e.change) for e in edges[ident]],
                        )
                    )
                    for edge in edges[ident]:
                        if edge.parent_id not in seen:
                            seen.add(edge.parent_id)
                            following.append(edge.parent_id)
                frontier = following
                depth += 1
            return steps

        return self._read(work, "ancestry")

    # -- policy and archive ----------------------------------------------------------------

    def policy(self, run_id: str) -> list[PolicyRecord]:
        def work(session: Session) -> list[PolicyRecord]:
            rows = session.scalars(
                select(Policy).where(Policy.run_id == run_id).order_by(Policy.operator, Policy.context)
            )
            return [PolicyRecord(r.operator, r.context, r.successes, r.trials) for r in rows]

        return self._read(work, "policy")

    def archive(self, run_id: str) -> list[ArchiveRecord]:
        def work(session: Session) -> list[ArchiveRecord]:
            rows = session.execute(
                select(Archive, Genome)
                .join(Genome, Genome.id == Archive.genome_id)
                .where(Archive.run_id == run_id)
                .order_by(Archive.id)
            )
            return [ArchiveRecord(a.genome_id, g.yaml, g.sequence, a.metrics) for a, g in rows]

        return self._read(work, "archive")

    # -- artifacts -------------------------------------------------------------------------

    def put_artifact(
        self,
        run_id: str,
        individual_id: int,
        kind: str,
        data: bytes | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
    ) -> str:
        """Keep safetensors weights of an individual: the bytes inline, or a file's path.

        Give exactly one of ``data`` / ``path``. Returns the sha256 checked on every read.
        A second put of the same (individual, kind) replaces the first.
        """
        if (data is None) == (path is None):
            raise StoreError("put_artifact: give exactly one of data= or path=")
        stored_path: str | None = None
        if path is not None:
            file = Path(path).resolve()
            try:
                content = file.read_bytes()
            except OSError as exc:
                raise StoreError(f"put_artifact: cannot read {file}: {exc}") from exc
            stored_path = os.fspath(file)
        else:
            content = bytes(data)  # type: ignore[arg-type]
        _check_safetensors(content)
        digest = hashlib.sha256(content).hexdigest()

        def work(session: Session) -> str:
            birth = session.get(Individual, individual_id)
            if birth is None or birth.run_id != run_id:
                raise StoreError(f"run {run_id} has no individual {individual_id}")
            row = session.scalars(
                select(Artifact).where(Artifact.individual_id == individual_id, Artifact.kind == kind)
            ).first()
            if row is None:
                row = Artifact(run_id=run_id, individual_id=individual_id, kind=kind)
                session.add(row)
            row.path = stored_path
            row.blob = None if stored_path is not None else content
            row.sha256 = digest
            return digest

        return self._write(work, "put_artifact")

    def get_artifact(self, individual_id: int, kind: str) -> bytes | None:
        """The stored safetensors bytes (None if absent); a sha256 mismatch raises."""

        def work(session: Session) -> tuple[str | None, bytes | None, str] | None:
            row = session.scalars(
                select(Artifact).where(Artifact.individual_id == individual_id, Artifact.kind == kind)
            ).first()
            return None if row is None else (row.path, row.blob, row.sha256)

        found = self._read(work, "get_artifact")
        if found is None:
            return None
        stored_path, blob, digest = found
        if stored_path is not None:
            try:
                content = Path(stored_path).read_bytes()
            except OSError as exc:
                raise StoreError(f"artifact {kind} of {individual_id}: {exc}") from exc
        else:
            content = blob or b""
        actual = hashlib.sha256(content).hexdigest()
        if actual != digest:
            raise StoreError(
                f"artifact {kind} of individual {individual_id} is damaged: sha256 {actual} "
                f"differs from the stored {digest}"
            )
        return content

    # -- leases ----------------------------------------------------------------------------

    def update_leases(self, run_id: str, updates: Iterable[LeaseIn]) -> None:
        """Upsert the driver's lease news in one transaction (see :class:`LeaseIn`).

        A lease that is no longer running (done, expired, lost, cancelled) is final: a
        late heartbeat of the same attempt cannot turn it back into running.
        """
        batch = list(updates)
        for update in batch:
            if update.state not in LEASE_STATES:
                raise StoreError(f"lease state must be one of {LEASE_STATES}, not {update.state!r}")
            _fidelity_key(update.fidelity)
        if not batch:
            return

        def work(session: Session) -> None:
            if session.get(Run, run_id) is None:
                raise StoreError(f"no run {run_id!r}")
            now = utcnow()
            for update in batch:
                key = _fidelity_key(update.fidelity)
                row = session.scalars(
                    select(Lease).where(
                        Lease.run_id == run_id,
                        Lease.genome_id == update.genome_id,
                        Lease.task == update.task,
                        Lease.fidelity == key,
                        Lease.seed == update.seed,
                        Lease.attempt == update.attempt,
                    )
                ).first()
                if row is None:
                    row = Lease(
                        run_id=run_id,
                        genome_id=update.genome_id,
                        task=update.task,
                        fidelity=key,
                        seed=update.seed,
                        attempt=update.attempt,
                        started=now,
                    )
                    session.add(row)
                elif row.state != "running":
                    continue
                row.state = update.state
                row.heartbeat = now
                row.expires = now + timedelta(seconds=max(0.0, float(update.lease_s)))
                if update.worker is not None:
                    row.worker = update.worker
                if update.reason is not None:
                    row.reason = update.reason

        self._write(work, "update_leases")

    def reclaim_expired_leases(self, run_id: str | None = None) -> int:
        """Mark running leases past their expiry as ``expired``; return how many.

        Called when a driver starts or resumes: attempts of a driver that died were never
        closed, and nobody else will close them. The evaluations themselves are not
        touched: a generation's results are only ever those committed with it.
        """

        def work(session: Session) -> int:
            now = utcnow()
            query = select(Lease).where(Lease.state == "running", Lease.expires < now)
            if run_id is not None:
                query = query.where(Lease.run_id == run_id)
            rows = session.scalars(query).all()
            for row in rows:
                row.state = "expired"
                row.reason = row.reason or "reclaimed: no heartbeat before the lease expired"
            return len(rows)

        return self._write(work, "reclaim_expired_leases")

    def leases(self, run_id: str, state: str | None = None) -> list[LeaseRecord]:
        """Leases of a run, oldest first; optionally only those in ``state``."""
        if state is not None and state not in LEASE_STATES:
            raise StoreError(f"lease state must be one of {LEASE_STATES}, not {state!r}")

        def work(session: Session) -> list[LeaseRecord]:
            query = select(Lease).where(Lease.run_id == run_id)
            if state is not None:
                query = query.where(Lease.state == state)
            return [
                LeaseRecord(
                    run_id=row.run_id,
                    genome_id=row.genome_id,
                    task=row.task,
                    fidelity=json.loads(row.fidelity),
                    seed=row.seed,
                    attempt=row.attempt,
                    state=row.state,
                    worker=row.worker,
                    reason=row.reason,
                    started=row.started,
                    heartbeat=row.heartbeat,
                    expires=row.expires,
                )
                for row in session.scalars(query.order_by(Lease.id))
            ]

        return self._read(work, "leases")


# -- helpers for commit_generation ----------------------------------------------------------


class _Payload:
    """The validated content of one generation, before any id of it exists."""

    def __init__(self) -> None:
        self.genomes: dict[str, GenomeIn] = {}
        self.individuals: list[IndividualIn] = []
        self.evaluations: list[EvaluationIn] = []
        self.lineage: list[LineageIn] = []
        self.members: list[Ref] = []
        self.policy: list[PolicyIn] = []
        self.archive: dict[str, ArchiveIn] = {}
        self.archive_remove: set[str] = set()

    @classmethod
    def build(
        cls,
        genomes: Iterable[GenomeIn | tuple[str, str, str]],
        individuals: Iterable[IndividualIn],
        evaluations: Iterable[EvaluationIn],
        lineage: Iterable[LineageIn],
        members: Iterable[Ref],
        policy: Iterable[PolicyIn],
        archive: Iterable[ArchiveIn],
        archive_remove: Iterable[str],
    ) -> _Payload:
        payload = cls()
        for item in genomes:
            genome = GenomeIn(*item)
            if not _HEX.fullmatch(genome.id):
                raise StoreError(f"genome id must be lowercase hex, not {genome.id!r}")
            known = payload.genomes.get(genome.id)
            if known is not None and known != genome:
                raise StoreError(f"genome {genome.id} given twice with different content")
            payload.genomes[genome.id] = genome
        payload.individuals = list(individuals)
        slots = [ind.slot for ind in payload.individuals]
        if len(set(slots)) != len(slots):
            raise StoreError("two individuals share a slot")
        payload.evaluations = list(evaluations)
        for evaluation in payload.evaluations:
            if evaluation.status not in EVALUATION_STATUSES:
                raise StoreError(
                    f"evaluation status must be one of {EVALUATION_STATUSES}, not {evaluation.status!r}"
                )
            _fidelity_key(evaluation.fidelity)
            if evaluation.individual is not None:
                _ref(evaluation.individual, "evaluation of " + evaluation.genome_id[:12])
        payload.lineage = list(lineage)
        for edge in payload.lineage:
            _ref(edge.parent, f"parent of slot {edge.child}")
        payload.members = [_ref(member, "member") for member in members]
        payload.policy = list(policy)
        for entry in archive:
            if entry.genome_id in payload.archive:
                raise StoreError(f"genome {entry.genome_id} appears twice in the archive")
            payload.archive[entry.genome_id] = entry
        if isinstance(archive_remove, str):
            raise StoreError("archive_remove is a list of genome ids, not one string")
        payload.archive_remove = set(archive_remove)
        both = payload.archive_remove & set(payload.archive)
        if both:
            raise StoreError(f"genome {min(both)} is both added to and removed from the archive")
        return payload

    # -- resolving references

    @staticmethod
    def _resolve(ref: Ref, slot_ids: dict[int, int], earlier: set[int], what: str) -> int:
        kind, number = ref
        if kind == "slot":
            if number not in slot_ids:
                raise StoreError(f"{what}: no individual in slot {number} of this generation")
            return slot_ids[number]
        if number not in earlier:
            raise StoreError(f"{what}: individual {number} is not in this run")
        return number

    def _earlier_ids(self, session: Session, run_id: str, generation: int) -> set[int]:
        """Ids given as ("id", n) that are births of this run before ``generation``."""
        asked = {n for kind, n in self._refs() if kind == "id"}
        found: set[int] = set()
        ordered = sorted(asked)
        for chunk in _chunks(ordered):
            found.update(
                session.scalars(
                    select(Individual.id).where(
                        Individual.id.in_(chunk),
                        Individual.run_id == run_id,
                        Individual.generation < generation,
                    )
                )
            )
        return found

    def _refs(self) -> Iterator[Ref]:
        yield from self.members
        for edge in self.lineage:
            yield _ref(edge.parent, "parent")
        for evaluation in self.evaluations:
            if evaluation.individual is not None:
                yield _ref(evaluation.individual, "evaluation")

    def _resolved_lineage(
        self, slot_ids: dict[int, int], earlier: set[int]
    ) -> dict[tuple[int, int], LineageIn]:
        """(child id, parent id) → edge; a repeated pair (self-crossover) is kept once."""
        edges: dict[tuple[int, int], LineageIn] = {}
        for edge in self.lineage:
            child = self._resolve(("slot", edge.child), slot_ids, set(), "lineage child")
            parent = self._resolve(
                _ref(edge.parent, "parent"), slot_ids, earlier, f"parent of slot {edge.child}"
            )
            if parent == child:
                raise StoreError(f"slot {edge.child} is given as its own parent")
            edges.setdefault((child, parent), edge)
        return edges

    def _resolved_members(self, slot_ids: dict[int, int], earlier: set[int]) -> list[int]:
        ids = [self._resolve(ref, slot_ids, earlier, "member") for ref in self.members]
        if len(set(ids)) != len(ids):
            raise StoreError("an individual appears twice among the members")
        return ids

    def _check_genomes_known(self, session: Session) -> None:
        wanted = {ind.genome_id for ind in self.individuals}
        wanted |= {ev.genome_id for ev in self.evaluations}
        wanted |= set(self.archive)
        missing = sorted(wanted - set(self.genomes))
        found: set[str] = set()
        for chunk in _chunks(missing):
            found.update(session.scalars(select(Genome.id).where(Genome.id.in_(chunk))))
        unknown = [genome_id for genome_id in missing if genome_id not in found]
        if unknown:
            raise StoreError(f"genome {unknown[0]} is neither given nor stored")

    # -- first commit

    def insert(self, session: Session, run_id: str, generation: int) -> dict[int, int]:
        self._insert_genomes(session)
        self._check_genomes_known(session)

        births = [
            Individual(
                run_id=run_id,
                generation=generation,
                slot=ind.slot,
                genome_id=ind.genome_id,
                seed=ind.seed,
                operator=ind.operator,
                change=ind.change,
            )
            for ind in self.individuals
        ]
        session.add_all(births)
        session.flush()
        slot_ids = {birth.slot: birth.id for birth in births}
        earlier = self._earlier_ids(session, run_id, generation)

        for (child, parent), edge in self._resolved_lineage(slot_ids, earlier).items():
            session.add(Lineage(child_id=child, parent_id=parent, operator=edge.operator, change=edge.change))
        for rank, individual_id in enumerate(self._resolved_members(slot_ids, earlier)):
            session.add(Member(run_id=run_id, generation=generation, rank=rank, individual_id=individual_id))
        self._insert_evaluations(session, run_id, slot_ids, earlier)
        self._upsert_policy(session, run_id)
        self._upsert_archive(session, run_id)
        session.flush()
        return slot_ids

    def _insert_genomes(self, session: Session) -> None:
        ids = sorted(self.genomes)
        stored: dict[str, str] = {}
        for chunk in _chunks(ids):
            query = select(Genome.id, Genome.yaml).where(Genome.id.in_(chunk))
            stored.update((genome_id, text) for genome_id, text in session.execute(query))
        for genome_id, yaml_text in stored.items():
            if yaml_text != self.genomes[genome_id].yaml:
                raise StoreError(f"genome {genome_id} is already stored with different YAML")
        rows = [
            {"id": g.id, "yaml": g.yaml, "sequence": g.sequence}
            for g in self.genomes.values()
            if g.id not in stored
        ]
        if not rows:
            return
        dialect = session.get_bind().dialect.name
        if dialect in ("sqlite", "postgresql"):
            # Genomes are shared by runs: another run may insert the same one concurrently.
            if dialect == "sqlite":
                from sqlalchemy.dialects.sqlite import insert as dialect_insert
            else:
                from sqlalchemy.dialects.postgresql import insert as dialect_insert
            statement = dialect_insert(Genome).on_conflict_do_nothing(index_elements=["id"])
            session.execute(statement, rows)
        else:
            session.execute(insert(Genome), rows)

    def _insert_evaluations(
        self, session: Session, run_id: str, slot_ids: dict[int, int], earlier: set[int]
    ) -> None:
        seen: set[tuple[str, str, str, int]] = set()
        for evaluation in self.evaluations:
            key = (
                evaluation.genome_id,
                evaluation.task,
                _fidelity_key(evaluation.fidelity),
                evaluation.seed,
            )
            individual_id = None
            if evaluation.individual is not None:
                individual_id = self._resolve(
                    _ref(evaluation.individual, "evaluation"),
                    slot_ids,
                    earlier,
                    f"evaluation of genome {evaluation.genome_id[:12]}",
                )
            if key in seen or _evaluation_exists(session, run_id, key):
                continue  # natural key already stored: a retried task is not a new row
            seen.add(key)
            session.add(
                Evaluation(
                    run_id=run_id,
                    genome_id=key[0],
                    task=key[1],
                    fidelity=key[2],
                    seed=key[3],
                    individual_id=individual_id,
                    status=evaluation.status,
                    reason=evaluation.reason,
                    metrics=evaluation.metrics,
                    wall_seconds=evaluation.wall_seconds,
                )
            )

    def _upsert_policy(self, session: Session, run_id: str) -> None:
        if not self.policy:
            return
        stored = {
            (row.operator, row.context): row
            for row in session.scalars(select(Policy).where(Policy.run_id == run_id))
        }
        for entry in self.policy:
            row = stored.get((entry.operator, entry.context))
            if row is None:
                row = Policy(run_id=run_id, operator=entry.operator, context=entry.context)
                session.add(row)
                stored[(entry.operator, entry.context)] = row
            row.successes = float(entry.successes)
            row.trials = float(entry.trials)

    def _upsert_archive(self, session: Session, run_id: str) -> None:
        if not self.archive and not self.archive_remove:
            return
        stored = {
            row.genome_id: row for row in session.scalars(select(Archive).where(Archive.run_id == run_id))
        }
        for genome_id in sorted(self.archive_remove & set(stored)):
            session.delete(stored[genome_id])
        for genome_id, entry in self.archive.items():
            row = stored.get(genome_id)
            if row is None:
                session.add(Archive(run_id=run_id, genome_id=genome_id, metrics=entry.metrics))
            else:
                row.metrics = entry.metrics

    # -- retried commit

    def verify_stored(self, session: Session, run_id: str, generation: int) -> dict[int, int]:
        """The stored slot → id of an already committed generation, if it matches."""

        def differs(what: str) -> StoreError:
            return StoreError(
                f"run {run_id}: generation {generation} is already committed with different "
                f"{what}; the generation counter cannot go back"
            )

        births = {
            row.slot: row
            for row in session.scalars(
                select(Individual).where(Individual.run_id == run_id, Individual.generation == generation)
            )
        }
        if set(births) != {ind.slot for ind in self.individuals}:
            raise differs("births")
        for ind in self.individuals:
            row = births[ind.slot]
            if (row.genome_id, row.seed, row.operator, canonical_json(row.change)) != (
                ind.genome_id,
                ind.seed,
                ind.operator,
                canonical_json(ind.change),
            ):
                raise differs(f"birth in slot {ind.slot}")
        slot_ids = {slot: row.id for slot, row in births.items()}
        earlier = self._earlier_ids(session, run_id, generation)
        try:
            offered_edges = self._resolved_lineage(slot_ids, earlier)
            offered_members = self._resolved_members(slot_ids, earlier)
        except StoreError as exc:
            raise differs(f"references ({exc})") from None

        child_ids = sorted(slot_ids.values())
        stored_edges: dict[tuple[int, int], tuple[str | None, str]] = {}
        for chunk in _chunks(child_ids):
            for edge in session.scalars(select(Lineage).where(Lineage.child_id.in_(chunk))):
                stored_edges[(edge.child_id, edge.parent_id)] = (
                    edge.operator,
                    canonical_json(edge.change),
                )
        offered = {pair: (edge.operator, canonical_json(edge.change)) for pair, edge in offered_edges.items()}
        if stored_edges != offered:
            raise differs("lineage")

        stored_members = list(
            session.scalars(
                select(Member.individual_id)
                .where(Member.run_id == run_id, Member.generation == generation)
                .order_by(Member.rank)
            )
        )
        if stored_members != offered_members:
            raise differs("members")

        for evaluation in self.evaluations:
            key = (
                evaluation.genome_id,
                evaluation.task,
                _fidelity_key(evaluation.fidelity),
                evaluation.seed,
            )
            if not _evaluation_exists(session, run_id, key):
                raise differs(f"evaluations (genome {evaluation.genome_id[:12]} missing)")
        return slot_ids


def _evaluation_exists(session: Session, run_id: str, key: tuple[str, str, str, int]) -> bool:
    genome_id, task, fidelity, seed = key
    found = session.scalars(
        select(Evaluation.id).where(
            Evaluation.run_id == run_id,
            Evaluation.genome_id == genome_id,
            Evaluation.task == task,
            Evaluation.fidelity == fidelity,
            Evaluation.seed == seed,
        )
    ).first()
    return found is not None


def _individual_records(
    session: Session, rows: list[Individual], run_id: str | None = None
) -> list[IndividualRecord]:
    """Records for births, with genome, parents and evaluations fetched in bulk.

    With ``run_id`` every row belongs to that run, and whole-run queries replace IN lists.
    """
    if not rows:
        return []
    genome_ids = sorted({row.genome_id for row in rows})
    run_ids = sorted({row.run_id for row in rows})
    ids = sorted({row.id for row in rows})

    genomes: dict[str, tuple[str, str]] = {}
    parents: dict[int, list[int]] = defaultdict(list)
    evaluations: dict[tuple[str, str], list[EvaluationRecord]] = defaultdict(list)
    if run_id is not None:
        genome_query = (
            select(Genome.id, Genome.yaml, Genome.sequence)
            .join(Individual, Individual.genome_id == Genome.id)
            .where(Individual.run_id == run_id)
            .distinct()
        )
        for genome_id, yaml_text, sequence in session.execute(genome_query):
            genomes[genome_id] = (yaml_text, sequence)
        child = select(Individual.id).where(Individual.run_id == run_id)
        edge_query = select(Lineage.child_id, Lineage.parent_id).where(
            Lineage.child_id.in_(child.scalar_subquery())
        )
        for child_id, parent_id in session.execute(edge_query.order_by(Lineage.id)):
            parents[child_id].append(parent_id)
        for evaluation in session.scalars(
            select(Evaluation).where(Evaluation.run_id == run_id).order_by(Evaluation.id)
        ):
            evaluations[(evaluation.run_id, evaluation.genome_id)].append(_evaluation_record(evaluation))
    else:
        for chunk in _chunks(genome_ids):
            query = select(Genome.id, Genome.yaml, Genome.sequence).where(Genome.id.in_(chunk))
            for genome_id, yaml_text, sequence in session.execute(query):
                genomes[genome_id] = (yaml_text, sequence)
        for chunk in _chunks(ids):
            query = select(Lineage.child_id, Lineage.parent_id).where(Lineage.child_id.in_(chunk))
            for child_id, parent_id in session.execute(query.order_by(Lineage.id)):
                parents[child_id].append(parent_id)
        for chunk in _chunks(genome_ids):
            query = select(Evaluation).where(Evaluation.genome_id.in_(chunk), Evaluation.run_id.in_(run_ids))
            for evaluation in session.scalars(query.order_by(Evaluation.id)):
                evaluations[(evaluation.run_id, evaluation.genome_id)].append(_evaluation_record(evaluation))

    tasks = {
        ident: task for ident, task in session.execute(select(Run.id, Run.task).where(Run.id.in_(run_ids)))
    }
    records = []
    for row in rows:
        yaml_text, sequence = genomes[row.genome_id]
        found = evaluations.get((row.run_id, row.genome_id), [])
        on_task = [e for e in found if e.task == tasks.get(row.run_id)]
        records.append(
            IndividualRecord(
                id=row.id,
                run_id=row.run_id,
                generation=row.generation,
                slot=row.slot,
                genome_id=row.genome_id,
                yaml=yaml_text,
                sequence=sequence,
                seed=row.seed,
                operator=row.operator,
                change=row.change,
                parents=list(parents.get(row.id, [])),
                evaluation=on_task[-1] if on_task else None,
                evaluations=list(found),
            )
        )
    return records
