"""Verifying a store: what ``evolve check`` reports, one :class:`Finding` per check.

:func:`check_store` runs every check over an open :class:`~store.store.Store`, each in a
read transaction of its own; nothing is written unless ``release_stale`` asks for it.
:func:`check_url` opens the store at a URL for that read-only (``Store(url, readonly=True)``):
its schema revision is read first, and a store that is not at the head is reported as it is.

The checks (``count`` is how many offending things were found, or fixed):

* **schema head**: the store's Alembic revision is the newest migration of this program
  (``store/migrations/versions``). A store at an older revision is upgraded by
  ``python -m dogma_evolve.store.migrations --url URL upgrade head`` or by a command that writes to it (the
  commands that only read refuse it); one at an unknown revision was written by a newer program.
* **lineage**: every ``lineage`` edge links two individuals that exist, of the same run, the
  child of a later generation than its parent; no individual is its own ancestor.
* **natural keys**: no two rows share a key the schema declares unique (on a store whose
  table lacks the constraint); no two evaluations of a run share the natural key (genome,
  task, fidelity, seed) once the fidelity is read back (:func:`store.keys.fidelity_key`),
  and every fidelity is stored as its canonical text; every genome's id is the sha256 of its
  YAML, the content address every run shares it by.
* **leases**: no lease is left ``running`` that nobody watches: one past its expiry, or one
  of a run whose driver is dead (:mod:`store.leases`). Leases of live drivers are in flight.
* **run drivers**: no run is held by a dead driver, one whose heartbeat is stale or whose
  process is gone (:mod:`store.liveness`); such a run is shown ``interrupted``. A run released
  by its driver before it finished is ``interrupted`` too, but nothing is wrong with it: it is
  named in the detail (``evolve run --resume`` continues it).
* **artifacts**: every stored artifact's bytes (inline or in their file) still have the sha256
  stored with them (:func:`store.artifacts.checked_content`).

``release_stale`` closes the stale leases as ``expired`` and releases the runs of dead
drivers (:func:`store.liveness.release`), each re-judged inside the write transaction, so a
driver that beat meanwhile keeps its run; those findings are then ``fixed``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime

from sqlalchemy import Table, func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.schema import UniqueConstraint

import dogma_evolve.store.artifacts as artifacts
import dogma_evolve.store.leases as lease_rows
import dogma_evolve.store.liveness as liveness
import dogma_evolve.store.migrations as migrations
import dogma_evolve.store.schema as schema
import dogma_evolve.store.transactions as transactions
from dogma_evolve.store.connection import describe, open_engines
from dogma_evolve.store.keys import EvalKey, fidelity_key
from dogma_evolve.store.models import (
    Artifact,
    Base,
    Evaluation,
    Genome,
    Individual,
    Lease,
    Lineage,
    Run,
    utcnow,
)
from dogma_evolve.store.records import StoreError
from dogma_evolve.store.store import Store

OK, PROBLEM, FIXED = "ok", "problem", "fixed"
#: Offending ids a finding names in its detail (all of them are in ``ids``, up to LISTED).
NAMED = 4
LISTED = 50


@dataclass(frozen=True)
class Finding:
    """One check's result: ``status`` ok / problem / fixed, how many offending things, a
    one-line detail naming the first few, and their ids (at most :data:`LISTED`)."""

    check: str
    status: str
    count: int
    detail: str
    ids: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "ids": list(self.ids)}


def found(check: str, offenders: Sequence[str], clean: str, what: str, status: str = PROBLEM) -> Finding:
    """A finding over ``offenders`` (their names): ok with ``clean`` when there are none."""
    if not offenders:
        return Finding(check, OK, 0, clean)
    named = "; ".join(offenders[:NAMED]) + ("; ..." if len(offenders) > NAMED else "")
    count = len(offenders)
    return Finding(check, status, count, f"{count} {what}: {named}", tuple(offenders[:LISTED]))


# -- opening ------------------------------------------------------------------------------


def check_url(url: str, release_stale: bool = False) -> list[Finding]:
    """Every check of the store at ``url``; only the schema's when it is not at the head
    (the others read the head's tables, and opening the store would migrate it).
    :class:`StoreError` when ``url`` holds no store."""
    head = schema_finding(url)
    if head.status != OK:
        return [head]
    with Store(url, create=False, readonly=not release_stale) as store:
        return check_store(store, release_stale)


def schema_finding(url: str) -> Finding:
    """The schema check of the store at ``url``, read without opening it as a Store."""
    try:
        engines = open_engines(url, readonly=True)
    except Exception as exc:  # SQLAlchemyError, or ImportError for a missing driver
        message = str(exc) if isinstance(exc, StoreError) else transactions.one_line(exc)
        raise StoreError(f"cannot open {describe(url)}: {message}") from exc
    try:
        stored, has_runs = transactions.read(
            engines.read, schema.revision_and_runs, "reading the schema revision"
        )
    except StoreError as exc:
        raise StoreError(f"cannot open {describe(url)}: {exc}") from exc
    finally:
        engines.dispose()
    if not stored and not has_runs:
        raise StoreError(f"cannot open {describe(url)}: it holds no evolve store (no runs table)")
    return head_finding(stored, url)


def head_finding(stored: tuple[str, ...], url: str) -> Finding:
    """Whether the stored revisions are this program's head (``url``: the store's, for the
    command that upgrades it)."""
    heads = sorted(migrations.heads())
    head = ", ".join(heads)
    if set(stored) == set(heads):
        return Finding("schema head", OK, 0, f"at revision {head}, the newest")
    unknown = [revision for revision in stored if not migrations.known(revision)]
    upgrade = schema.upgrade_command(url)
    if unknown:
        detail = f"revision {unknown[0]} is newer than this program's {head}: upgrade dogma-evolve"
    elif not stored:
        detail = f"no Alembic revision (a store of release 0.1), the newest is {head}: {upgrade} upgrades it"
    else:
        detail = f"at revision {', '.join(stored)}, the newest is {head}: {upgrade} upgrades it"
    return Finding("schema head", PROBLEM, 1, detail + "; the other checks need the newest schema", stored)


# -- the checks ---------------------------------------------------------------------------


def check_store(store: Store, release_stale: bool = False) -> list[Finding]:
    """Every check (module docstring) over ``store``, in order; with ``release_stale`` the
    stale leases and runs of dead drivers are released first and reported ``fixed``."""

    def schema_head(session: Session) -> Finding:
        return head_finding(schema.stored_revisions(session.connection()), store.url)

    findings = [
        store._read(schema_head, "check schema"),
        store._read(lineage_finding, "check lineage"),
        store._read(natural_keys_finding, "check natural keys"),
    ]
    if release_stale:  # leases first: they are judged by the drivers the second releases
        for check, release in (("leases", release_stale_leases), ("run drivers", release_dead_drivers)):
            released = store._write(release, f"release stale {check}")
            findings.append(found(check, released, "nothing stale to release", "released", FIXED))
    else:
        findings.append(store._read(lease_finding, "check leases"))
        findings.append(store._read(driver_finding, "check run drivers"))
    findings.append(store._read(artifact_finding, "check artifacts"))
    return findings


def lineage_finding(session: Session) -> Finding:
    """Dangling, cross-run and generation-reversing parent links, and ancestry cycles."""
    query = select(Individual.id, Individual.run_id, Individual.generation)
    births = {i: (run, gen) for i, run, gen in session.execute(query)}
    links = select(Lineage.id, Lineage.child_id, Lineage.parent_id).order_by(Lineage.id)
    edges = list(session.execute(links))
    offenders = [f"edge {e} (#{c} <- #{p}): {why}" for e, c, p in edges if (why := _edge_fault(births, c, p))]
    cycles = _cycles((c, p) for _, c, p in edges)
    offenders += [f"cycle {' -> '.join(f'#{i}' for i in cycle)}" for cycle in cycles]
    return found("lineage", offenders, f"{len(edges)} parent links of {len(births)} individuals", "bad links")


def _edge_fault(births: dict[int, tuple[str, int]], child: int, parent: int) -> str | None:
    """What is wrong with the edge child <- parent, or None."""
    if child not in births or parent not in births:
        return "child missing" if child not in births else "parent missing"
    (child_run, child_generation), (parent_run, parent_generation) = births[child], births[parent]
    if child_run != parent_run:
        return f"parent of run {parent_run}, child of run {child_run}"
    if child_generation <= parent_generation:
        return f"child of generation {child_generation}, parent of {parent_generation}"
    return None


def _cycles(edges: Iterable[tuple[int, int]]) -> list[list[int]]:
    """The loops of child -> parent links a depth-first walk meets, as individual ids."""
    parents: dict[int, list[int]] = {}
    for child, parent in edges:
        parents.setdefault(child, []).append(parent)
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[int]] = []
    for start in sorted(parents):
        if state.get(start):
            continue
        path, stack = [start], [iter(parents.get(start, ()))]
        state[start] = 1
        while stack:
            step = next(stack[-1], None)
            if step is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(step) == 1:
                cycles.append(path[path.index(step) :] + [step])
            elif not state.get(step):
                state[step] = 1
                path.append(step)
                stack.append(iter(parents.get(step, ())))
    return cycles


def natural_keys_finding(session: Session) -> Finding:
    """Duplicate keys (declared ones, evaluations' read-back one), non-canonical fidelities,
    genomes not at their content address."""
    offenders = [
        name for table in Base.metadata.sorted_tables for name in _declared_duplicates(session, table)
    ]
    offenders += _evaluation_keys(session)
    offenders += [
        f"genome {genome_id[:12]}: id is not the sha256 of its YAML"
        for genome_id, text in session.execute(select(Genome.id, Genome.yaml).order_by(Genome.id))
        if hashlib.sha256(text.encode()).hexdigest() != genome_id
    ]
    tables = len(Base.metadata.sorted_tables)
    return found(
        "natural keys",
        offenders,
        f"unique keys of {tables} tables, evaluations and genome ids",
        "duplicate or bad keys",
    )


def _declared_duplicates(session: Session, table: Table) -> list[str]:
    """Keys of ``table``'s unique constraints (and text primary key) held by several rows."""
    keys = [list(c.columns) for c in table.constraints if isinstance(c, UniqueConstraint)]
    if not any(column.autoincrement is True for column in table.primary_key.columns):
        keys.append(list(table.primary_key.columns))
    names = []
    for columns in keys:
        query = select(*columns, func.count()).group_by(*columns).having(func.count() > 1)
        for *key, count in session.execute(query):
            names.append(f"{table.name} ({', '.join(c.name for c in columns)}) = {tuple(key)} x{count}")
    return names


def _evaluation_keys(session: Session) -> list[str]:
    """Evaluations that share a run's natural key once read back, or spell a fidelity oddly."""
    seen: dict[tuple[str, EvalKey], int] = {}
    names = []
    query = select(
        Evaluation.id,
        Evaluation.run_id,
        Evaluation.genome_id,
        Evaluation.task,
        Evaluation.fidelity,
        Evaluation.seed,
    )
    for row_id, run_id, genome_id, task, text, seed in session.execute(query.order_by(Evaluation.id)):
        fidelity, canonical = _read_fidelity(text)
        if not canonical:
            names.append(f"evaluation {row_id}: fidelity {text!r} is not canonical")
        key = (run_id, EvalKey(genome_id, task, fidelity, seed))
        if key in seen:
            names.append(f"evaluation {row_id}: same key as evaluation {seen[key]}")
        seen.setdefault(key, row_id)
    return names


def _read_fidelity(text: str) -> tuple[object, bool]:
    """The fidelity a stored text holds (the text itself when it holds none), and whether
    the text is that fidelity's canonical form."""
    try:
        value = json.loads(text)
        return value, fidelity_key(value) == text
    except (ValueError, StoreError):
        return text, False


# -- leases and drivers -------------------------------------------------------------------


def stale_leases(session: Session, now: datetime) -> list[tuple[Lease, str]]:
    """Running leases nobody watches, with why: past their expiry, or their run's driver is
    dead. A run without a driver is judged by the expiry alone (the driver that wrote the
    lease may not hold its run)."""
    query = select(Lease, Run.driver, Run.heartbeat).join(Run, Run.id == Lease.run_id)
    stale = []
    for lease, driver, heartbeat in session.execute(query.where(Lease.state == "running").order_by(Lease.id)):
        if lease.expires < now:
            stale.append((lease, f"expired {(now - lease.expires).total_seconds():.0f} s ago"))
        elif driver is not None and not liveness.driver_alive(driver, heartbeat, now):
            stale.append((lease, f"its driver {driver} is dead"))
    return stale


def _lease_name(lease: Lease, why: str) -> str:
    genome = lease.genome_id[:12]
    return f"lease {lease.id} (run {lease.run_id}, genome {genome}, attempt {lease.attempt}): {why}"


def lease_finding(session: Session) -> Finding:
    now = utcnow()
    offenders = [_lease_name(lease, why) for lease, why in stale_leases(session, now)]
    open_leases = session.scalar(select(func.count()).select_from(Lease).where(Lease.state == "running")) or 0
    clean = f"{open_leases} open leases, all of live drivers" if open_leases else "no open lease"
    return found("leases", offenders, clean, "stale open leases (release with --release-stale)")


def release_stale_leases(session: Session) -> list[str]:
    """Close every stale lease as ``expired`` (those past their expiry as
    :func:`store.leases.reclaim_expired` does); the names of those closed."""
    now = utcnow()
    stale = stale_leases(session, now)
    for run_id in sorted({lease.run_id for lease, _ in stale}):
        lease_rows.reclaim_expired(session, run_id)
    for lease, why in stale:
        lease.state = "expired"
        lease.reason = lease.reason or f"released by evolve check: {why}"
    return [_lease_name(lease, why) for lease, why in stale]


def dead_drivers(session: Session, now: datetime) -> list[Run]:
    """Runs held by a driver that is not alive (stale heartbeat, or its process is gone)."""
    held = session.scalars(select(Run).where(Run.driver.is_not(None)).order_by(Run.created, Run.id))
    return [run for run in held if not liveness.driver_alive(run.driver, run.heartbeat, now)]


def _driver_name(run: Run, now: datetime) -> str:
    age = liveness.age_s(run.heartbeat, now)
    beat = "no heartbeat" if age is None else f"last heartbeat {age:.0f} s ago"
    return f"run {run.id} ({run.status}): driver {run.driver} is dead, {beat}"


def driver_finding(session: Session) -> Finding:
    now = utcnow()
    offenders = [_driver_name(run, now) for run in dead_drivers(session, now)]
    released = session.scalars(
        select(Run.id).where(Run.status == "running", Run.driver.is_(None)).order_by(Run.created, Run.id)
    ).all()
    clean = "every held run has a live driver"
    if released:
        named = ", ".join(released[:NAMED])
        clean += f"; {len(released)} interrupted, released (evolve run --resume continues): {named}"
    return found("run drivers", offenders, clean, "runs held by a dead driver (release with --release-stale)")


def release_dead_drivers(session: Session) -> list[str]:
    """Release every run a dead driver holds (:func:`store.liveness.release`, which locks the
    row and clears it only while that driver still holds it); the names of those released."""
    now = utcnow()
    names = []
    for run in dead_drivers(session, now):
        name, driver = _driver_name(run, now), run.driver
        if driver is not None and liveness.release(session, run.id, driver):
            names.append(name)
    return names


# -- artifacts ----------------------------------------------------------------------------


def artifact_finding(session: Session) -> Finding:
    """Artifacts whose bytes (inline or in their file) no longer match their sha256."""
    total, offenders = 0, []
    for row in session.scalars(select(Artifact).order_by(Artifact.id).execution_options(yield_per=16)):
        total += 1
        try:
            artifacts.checked_content(row.individual_id, row.kind, (row.path, row.blob, row.sha256))
        except StoreError as exc:
            where = "inline" if row.path is None else f"file {row.path}"
            fault = "damaged" if "damaged" in str(exc) else "unreadable"
            offenders.append(
                f"artifact {row.id} ({row.kind} of individual {row.individual_id}, {where}): {fault}"
            )
    clean = f"{total} artifacts match their sha256"
    return found("artifacts", offenders, clean, "artifacts fail their sha256")
