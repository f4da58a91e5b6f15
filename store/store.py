"""The run store: runs, genomes, births, evaluations, lineage, policy, archive, weights.

One writer per run (the driver) commits each generation in one transaction with
:meth:`Store.commit_generation`; a killed run resumes from ``last_generation`` with nothing
lost and, because every row has a natural key, nothing doubled when a commit is retried.

:class:`Store` is the facade: it owns the engines and runs each method as one transaction
(:mod:`store.transactions`); the work itself lives with its job: opening and schema
(:mod:`store.schema`), the generation commit (:mod:`store.commit`), read queries
(:mod:`store.queries`), weights (:mod:`store.artifacts`), leases (:mod:`store.leases`) and
who drives a run (:mod:`store.liveness`).

A Store may be used from several threads (the driver's heartbeat thread beside its loop):
every method opens a session of its own; an in-memory SQLite store, whose one connection is
shared, runs its transactions one at a time under a lock.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

import dogma_evolve.store.artifacts as artifacts
import dogma_evolve.store.commit as commit
import dogma_evolve.store.leases as lease_rows
import dogma_evolve.store.liveness as liveness
import dogma_evolve.store.outage as outage
import dogma_evolve.store.queries as queries
import dogma_evolve.store.ranks as ladder_ranks
import dogma_evolve.store.transactions as transactions
from dogma_evolve.store.connection import BUSY_TIMEOUT_SECONDS, Engines, describe, open_engines
from dogma_evolve.store.models import RUN_KINDS, RUN_STATUSES, Run, utcnow
from dogma_evolve.store.records import (
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
    PolicyIn,
    PolicyRecord,
    Ref,
    RunRecord,
    StoreError,
    TransferIn,
    TransferRecord,
)
from dogma_evolve.store.schema import require_head, upgrade_to_head

T = TypeVar("T")


class Store:
    """Persistent record of evolutionary runs (SQLite file by default, any SQLAlchemy URL).

    Use as a context manager or call :meth:`close`. Every method returns plain values
    (dataclasses from :mod:`store.records`) and raises :class:`StoreError` on refusal or
    database failure, with a one-line message.
    """

    def __init__(
        self,
        url: str = "sqlite:///evolve.db",
        *,
        busy_timeout: float = BUSY_TIMEOUT_SECONDS,
        create: bool = True,
        readonly: bool = False,
        retry_seconds: float | None = None,
    ) -> None:
        """Open (and, with ``create``, make) the store at ``url``, upgraded to the newest
        schema. ``create=False`` (a command that writes to a store that must exist): a SQLite
        file that does not exist and a database without the store's tables are refused with
        a :class:`StoreError`, and nothing is created.

        ``readonly`` (the commands that only read) opens it without ever writing: nothing is
        created, migrated or switched to WAL, a store at an older schema revision is refused
        with the command that upgrades it, and every write method raises :class:`StoreError`.
        """
        self.url = url
        self.readonly = readonly
        self._outage = outage.Outage(outage.retry_seconds(retry_seconds))
        try:
            self._engines: Engines | None = open_engines(url, busy_timeout, create=create, readonly=readonly)
        except (SQLAlchemyError, ImportError) as exc:  # ImportError: the URL's driver is missing
            raise StoreError(f"cannot open {describe(url)}: {transactions.one_line(exc)}") from exc
        # one shared connection (in-memory SQLite): one transaction at a time across threads
        shared = isinstance(self._engines.write.pool, StaticPool)
        self._serial: AbstractContextManager[Any] = threading.RLock() if shared else nullcontext()
        try:
            if readonly:
                require_head(self._engines, url)
            else:
                upgrade_to_head(self._engines, create=create)
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

    def _live(self) -> Engines:
        if self._engines is None:
            raise StoreError("store is closed")
        return self._engines

    def _write(self, work: Callable[[Session], T], what: str) -> T:
        """Run ``work`` in one write transaction (BEGIN IMMEDIATE on SQLite)."""
        engines = self._live()
        if engines.readonly:
            raise StoreError(f"{what}: the store was opened read-only")
        with self._serial:
            return transactions.write(engines.write, work, what, self._outage)

    def _read(self, work: Callable[[Session], T], what: str) -> T:
        """Run ``work`` in one read transaction: one consistent snapshot, no write lock."""
        engines = self._live()
        with self._serial:
            return transactions.read(engines.read, work, what, self._outage)

    # -- runs ------------------------------------------------------------------------------

    def create_run(
        self,
        config: dict[str, Any],
        seed: int,
        task: str,
        kind: str = "search",
        *,
        driver: str | None = None,
    ) -> str:
        """Record a new run (status 'running', nothing committed) and return its id.

        ``kind`` is one of :data:`RUN_KINDS`: a ``search`` (``evolve run``), or the training
        run of ``evolve scale``, ``evolve ablate``, ``evolve calibrate`` or of a search's
        finalists (``select``). ``driver``: the
        token of the driver that creates it, which then holds it (as :meth:`claim_run`, in
        the same transaction); without one the run is shown ``interrupted`` until claimed."""
        _check_kind(kind)
        if driver is not None and not 0 < len(driver) <= liveness.DRIVER_LENGTH:
            raise StoreError(f"a driver token must be 1 to {liveness.DRIVER_LENGTH} characters")
        run_id = uuid.uuid4().hex[:12]

        def work(session: Session) -> str:
            landed = session.get(Run, run_id)
            if landed is not None:  # a retry whose first attempt committed: the run is made
                if (landed.kind, landed.seed, landed.task, landed.driver) != (kind, seed, task, driver):
                    raise StoreError(f"create_run: run id {run_id} is already taken by another run")
                return run_id
            heartbeat = None if driver is None else utcnow()
            row = Run(id=run_id, kind=kind, config=config, seed=seed, task=task)
            row.driver, row.heartbeat = driver, heartbeat
            session.add(row)
            return run_id

        return self._write(work, "create_run")

    def get_run(self, run_id: str) -> RunRecord | None:
        return self._read(lambda session: queries.run(session, run_id), "get_run")

    def list_runs(self, kind: str | None = None) -> list[RunRecord]:
        """All runs, or those of ``kind`` (one of :data:`RUN_KINDS`), oldest first."""
        if kind is not None:
            _check_kind(kind)
        return self._read(lambda session: queries.runs(session, kind), "list_runs")

    def newest_run(self, kind: str | None = None) -> RunRecord | None:
        """The run created last, or the last of ``kind`` (e.g. ``"search"``: the run a command
        means when none is named); None when the store holds none. The last of
        :meth:`list_runs` with the same ``kind``."""
        if kind is not None:
            _check_kind(kind)
        return self._read(lambda session: queries.newest_run(session, kind), "newest_run")

    def resolve_run(self, prefix: str) -> str:
        """The id of the one run whose id is ``prefix`` or starts with it.

        Raises :class:`StoreError` (one line) when no run matches or several do."""
        prefix = prefix.strip()
        if not prefix:
            raise StoreError("a run id (or a prefix of one) must not be empty")
        found = self._read(lambda session: queries.run_ids_with_prefix(session, prefix), "resolve_run")
        if prefix in found:
            return prefix
        if not found:
            raise StoreError(f"no run {prefix!r:.70}")
        if len(found) > 1:
            raise StoreError(f"run id prefix {prefix!r} is ambiguous: {len(found)} runs start with it")
        return found[0]

    def set_run_status(self, run_id: str, status: str, reason: str | None = None) -> None:
        """Set a run's status; ``reason`` says why it stopped (kept until the next stop)."""
        if status not in RUN_STATUSES:
            raise StoreError(f"run status must be one of {RUN_STATUSES}, not {status!r}")

        def work(session: Session) -> None:
            run = session.get(Run, run_id)
            if run is None:
                raise StoreError(f"no run {run_id!r}")
            run.status = status
            run.stop_reason = reason

        self._write(work, "set_run_status")

    # -- who drives a run (store.liveness) -------------------------------------------------

    def claim_run(
        self,
        run_id: str,
        driver: str,
        stale_after_s: float = liveness.STALE_AFTER_S,
        *,
        now: datetime | None = None,
    ) -> str | None:
        """Make ``driver`` the run's driver, with a fresh heartbeat, in one transaction.

        Taken when the run has no driver, its driver's heartbeat is older than
        ``stale_after_s`` seconds (that driver died: the claim is taken over) or the driver
        is ``driver`` itself; otherwise :class:`store.liveness.RunHeld` (a
        :class:`StoreError`) names the live driver and its heartbeat's age. Returns the
        stale driver taken over from, or None. ``now``: the clock (tests)."""
        return self._write(
            lambda session: liveness.claim(session, run_id, driver, stale_after_s, now), "claim_run"
        )

    def beat(self, run_id: str, driver: str, *, now: datetime | None = None) -> bool:
        """Refresh the heartbeat of ``driver``'s run; False (nothing written) when
        ``driver`` no longer holds it."""
        return self._write(lambda session: liveness.beat(session, run_id, driver, now), "beat")

    def release_run(self, run_id: str, driver: str) -> bool:
        """Clear the run's driver and heartbeat if ``driver`` holds it; whether it did."""
        return self._write(lambda session: liveness.release(session, run_id, driver), "release_run")

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
        transfer: Iterable[TransferIn] = (),
        driver: str | None = None,
    ) -> dict[int, int]:
        """Store generation ``generation`` of a run in one transaction; return slot → id.

        ``genomes`` are inserted if absent; ``individuals`` are the births of this
        generation; ``evaluations`` are inserted if their natural key is absent;
        ``lineage`` edges link a child (by slot) to a parent (by slot or id); ``members``
        is the population after this generation, in order (survivors of earlier
        generations by id). ``policy`` and ``archive`` rows are upserted by their keys
        (absolute values; rows not given are kept, so passing only what changed loses
        nothing); ``archive_remove`` names genome ids that leave the archive.
        ``transfer`` holds the run's fidelity transfer after this generation, one per pair
        of fidelities (a multi-fidelity run's engine gives one, others none).
        ``runs.last_generation`` becomes ``generation``. ``driver``: the committing driver's
        token; given, the commit is refused (:class:`store.liveness.RunLost`) unless that
        driver still holds the run, checked in the same transaction.

        Generations are committed in order: ``generation`` must be last_generation + 1.
        Committing a generation that is already stored (a retry after a lost
        acknowledgement) changes nothing and returns the stored ids when the births,
        lineage, members, evaluation keys and fidelity transfer match, and raises :class:`StoreError`
        otherwise, so the generation counter never goes back.
        """
        payload = commit.GenerationPayload.build(
            genomes, individuals, evaluations, lineage, members, policy, archive, archive_remove, transfer
        )

        def work(session: Session) -> dict[int, int]:
            if driver is not None:
                liveness.check_holder(session, run_id, driver)
            return commit.commit_generation(session, run_id, generation, payload)

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
        return self._read(
            lambda session: queries.find_evaluation(session, genome_id, task, fidelity, seed, run_id),
            "find_evaluation",
        )

    def key_evaluations(
        self, genome_id: str, task: str, fidelity: int | str, seed: int
    ) -> list[EvaluationRecord]:
        """Every stored result for this key in any run, oldest first: a cache that may reuse
        only some of them (another precision, other plugins) takes the oldest it may."""
        return self._read(
            lambda session: queries.key_evaluations(session, genome_id, task, fidelity, seed),
            "key_evaluations",
        )

    def scored_genomes(self, task: str, fidelity: int | str, limit: int = 5000) -> list[tuple[str, str, Any]]:
        """(genome id, YAML, metrics) of the newest ``limit`` successful evaluations of
        ``task`` at ``fidelity`` across every run (what a surrogate model learns from)."""
        return self._read(
            lambda session: queries.scored_genomes(session, task, fidelity, limit), "scored_genomes"
        )

    def population(self, run_id: str, generation: int | None = None) -> list[IndividualRecord]:
        """Members of a generation (default: the last committed one) in stored order."""
        return self._read(lambda session: queries.population(session, run_id, generation), "population")

    def individual(self, individual_id: int) -> IndividualRecord | None:
        return self._read(lambda session: queries.individual(session, individual_id), "individual")

    def individuals(self, run_id: str) -> list[IndividualRecord]:
        """Every birth of a run, by generation and slot, with evaluations (reports, fronts)."""
        return self._read(lambda session: queries.individuals(session, run_id), "individuals")

    def individuals_by_id(self, ids: Iterable[int]) -> list[IndividualRecord]:
        """The births with these ids that exist, by id, fetched in bulk (e.g. an ancestry's)."""
        wanted = list(ids)
        return self._read(lambda session: queries.individuals_by_id(session, wanted), "individuals_by_id")

    def find_individuals_by_genome_prefix(
        self, prefix: str, run_id: str | None = None
    ) -> list[IndividualRecord]:
        """Births whose genome id starts with ``prefix`` (hex, as a user types it)."""
        return self._read(
            lambda session: queries.individuals_by_genome_prefix(session, prefix, run_id),
            "find_individuals_by_genome_prefix",
        )

    def ancestry(self, individual_id: int) -> list[AncestryStep]:
        """The individual and its ancestors back to the seeds, breadth first.

        Every ancestor appears once (shared ancestors of a crossover too); a cycle in
        damaged data ends the walk instead of looping.
        """
        return self._read(lambda session: queries.ancestry(session, individual_id), "ancestry")

    # -- policy and archive ----------------------------------------------------------------

    def policy(self, run_id: str) -> list[PolicyRecord]:
        return self._read(lambda session: queries.policy(session, run_id), "policy")

    def archive(self, run_id: str) -> list[ArchiveRecord]:
        return self._read(lambda session: queries.archive(session, run_id), "archive")

    def transfer(self, run_id: str) -> list[TransferRecord]:
        """The run's stored fidelity transfer, by generation (none for a single-fidelity
        run, or for generations committed before revision 0004)."""
        return self._read(lambda session: queries.transfer(session, run_id), "transfer")

    def put_ladder(
        self,
        run_id: str,
        generation: int,
        rows: Iterable[ladder_ranks.LadderRankIn],
        transfer: Iterable[TransferIn] = (),
    ) -> None:
        """Keep the run's elite ranked up a size ladder after ``generation`` (revision 0005),
        with the ladder's rank transfer; replaces an earlier attempt's rows of that generation."""
        rows, transfer = list(rows), list(transfer)
        self._write(
            lambda session: ladder_ranks.put(session, run_id, generation, rows, transfer), "put_ladder"
        )

    def ladder(self, run_id: str) -> list[ladder_ranks.LadderRankRecord]:
        """The run's ladder ranks (none unless it ran with ``--ladder``)."""
        return self._read(lambda session: ladder_ranks.read(session, run_id), "ladder")

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
        weights = artifacts.Weights.given(data, path)
        return self._write(
            lambda session: artifacts.put(session, run_id, individual_id, kind, weights), "put_artifact"
        )

    def get_artifact(self, individual_id: int, kind: str) -> bytes | None:
        """The stored safetensors bytes (None if absent); a sha256 mismatch raises."""
        found = self._read(lambda session: artifacts.stored(session, individual_id, kind), "get_artifact")
        return None if found is None else artifacts.checked_content(individual_id, kind, found)

    # -- leases ----------------------------------------------------------------------------

    def update_leases(self, run_id: str, updates: Iterable[LeaseIn]) -> None:
        """Upsert the driver's lease news in one transaction (see :class:`LeaseIn`).

        A lease that is no longer running (done, expired, lost, cancelled) is final: a
        late heartbeat of the same attempt cannot turn it back into running.
        """
        batch = lease_rows.checked(updates)
        if batch:
            self._write(lambda session: lease_rows.update(session, run_id, batch), "update_leases")

    def reclaim_expired_leases(self, run_id: str | None = None) -> int:
        """Mark running leases past their expiry as ``expired``; return how many.

        Called when a driver starts or resumes: attempts of a driver that died were never
        closed, and nobody else will close them. The evaluations themselves are not
        touched: a generation's results are only ever those committed with it.
        """
        return self._write(
            lambda session: lease_rows.reclaim_expired(session, run_id), "reclaim_expired_leases"
        )

    def leases(self, run_id: str, state: str | None = None) -> list[LeaseRecord]:
        """Leases of a run, oldest first; optionally only those in ``state``."""
        if state is not None:
            lease_rows.check_state(state)
        return self._read(lambda session: lease_rows.records(session, run_id, state), "leases")


def _check_kind(kind: str) -> None:
    if kind not in RUN_KINDS:
        raise StoreError(f"run kind must be one of {RUN_KINDS}, not {kind!r:.70}")
