"""ORM tables of the run store.

Everything here is plain data: genome ids are sha256 hex strings, genomes are canonical YAML
text, metrics / change records / configs are JSON-able dicts kept as canonical JSON text
(``json.dumps(..., sort_keys=True)``), so a dict written comes back equal and two equal dicts
have equal text (which is how a retried commit is recognised as the same content).

Natural keys carry UNIQUE constraints so that a retried write can never double a row.

Every change to these tables comes with an Alembic revision in ``store/migrations``
(see that package's docstring for how to write one).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

RUN_STATUSES = ("running", "finished", "failed")
#: What a run is: an evolutionary ``search`` (``evolve run``, whatever its strategy), or the
#: training runs of ``evolve scale`` (a size ladder), ``evolve ablate`` (an ablation) and
#: ``evolve calibrate`` (a fidelity calibration), and a search's finalists trained longer
#: (``select``: ``evolve run --select-by long``). A Python check (``Store.create_run``), no
#: database constraint: a new kind needs no migration (``runs.kind`` is a 16-character string).
RUN_KINDS = ("search", "scale", "ablate", "calibrate", "select")
#: An evaluation row's status: what a training ended in ("ok" .. "crash"), or "filtered"
#: (the engine's pre-filter stopped the genome before any training: `SearchSpace.prefilter`;
#: no pool returns it). A Python check (`store.commit`), no database constraint: a new
#: status needs no migration.
EVALUATION_STATUSES = ("ok", "invalid", "nan", "oom", "timeout", "crash", "filtered")
LEASE_STATES = ("running", "done", "expired", "lost", "cancelled")
#: What a fidelity transfer row's lower side ranked by (``transfer.ranked_by``, 0008).
RANKED_BY = ("quality", "loss")
#: The ``schema_version`` row of every store Alembic manages, frozen: release 0.1 refuses a
#: store above its own 2. The schema's version is the Alembic revision (store/migrations).
LEGACY_SCHEMA_VERSION = 3


def canonical_json(value: Any) -> str:
    """One text per JSON value: sorted keys, no insignificant whitespace."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def utcnow() -> datetime:
    return datetime.now(UTC)


class JSONText(TypeDecorator[Any]):
    """A JSON value stored as canonical text (see :func:`canonical_json`).

    Plain text rather than a native JSON type, so SQLite and PostgreSQL store the same bytes
    and equality of content is equality of text.
    """

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else canonical_json(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps stored as naive UTC (SQLite keeps no zone) and returned zone-aware."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    pass


class Run(Base):
    """One run: its kind, configuration, seed, task and how far it has committed.

    ``kind`` is one of :data:`RUN_KINDS` (revision 0006; before it, scale and ablate runs
    said so in their config's ``"kind"`` key). ``last_generation`` is the newest generation
    committed in full (-1: none yet); a resumed run continues from it, and it never goes back.
    ``driver`` / ``heartbeat`` (revision 0007): the token of the process that holds the run
    and its last heartbeat (:mod:`store.liveness`); NULL when nobody holds it.
    """

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    created: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    status: Mapped[str] = mapped_column(String(16), default="running")
    kind: Mapped[str] = mapped_column(String(16))  # search, scale or ablate (0006)
    config: Mapped[Any] = mapped_column(JSONText)
    seed: Mapped[int] = mapped_column(BigInteger)  # 63-bit derived seeds
    task: Mapped[str] = mapped_column(Text)
    last_generation: Mapped[int] = mapped_column(Integer, default=-1)
    stop_reason: Mapped[str | None] = mapped_column(Text, nullable=True)  # why it ended (0003)
    # who drives it and when it last said so (0007, `store.liveness`); both NULL: nobody
    heartbeat: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    driver: Mapped[str | None] = mapped_column(String(255), nullable=True)


class Genome(Base):
    """A genome's canonical YAML, keyed by its content hash; shared by every run."""

    __tablename__ = "genomes"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    yaml: Mapped[str] = mapped_column(Text)
    sequence: Mapped[str] = mapped_column(Text)
    created: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Individual(Base):
    """A birth: one genome placed in slot ``slot`` of generation ``generation`` of a run.

    The same genome can be born many times (in several runs or generations); each birth has
    its own seed and the operator that made it (None for seeds of the run).
    """

    __tablename__ = "individuals"
    __table_args__ = (UniqueConstraint("run_id", "generation", "slot"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    generation: Mapped[int] = mapped_column(Integer)
    slot: Mapped[int] = mapped_column(Integer)
    genome_id: Mapped[str] = mapped_column(ForeignKey("genomes.id"), index=True)
    seed: Mapped[int] = mapped_column(BigInteger)  # 63-bit derived seeds
    operator: Mapped[str | None] = mapped_column(Text, nullable=True)
    change: Mapped[Any | None] = mapped_column(JSONText, nullable=True)


class Member(Base):
    """Population membership: which individuals make up generation ``generation``, in order.

    Survivors of earlier generations appear again here; ``rank`` restores the order.
    """

    __tablename__ = "members"
    __table_args__ = (
        UniqueConstraint("run_id", "generation", "individual_id"),
        UniqueConstraint("run_id", "generation", "rank"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    generation: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    individual_id: Mapped[int] = mapped_column(ForeignKey("individuals.id"), index=True)


class Evaluation(Base):
    """The result of training and scoring one genome on a task at a fidelity with a seed.

    The natural key (run, genome, task, fidelity, seed) is UNIQUE, so a retried evaluation
    cannot double a row; it is also the evaluation cache key. ``fidelity`` holds the
    canonical JSON of the caller's value (an int level or a name), so both round-trip.
    ``individual_id`` is the birth whose evaluation produced the row.
    """

    __tablename__ = "evaluations"
    __table_args__ = (
        UniqueConstraint("run_id", "genome_id", "task", "fidelity", "seed"),
        Index("ix_evaluations_cache", "genome_id", "task", "fidelity", "seed"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    genome_id: Mapped[str] = mapped_column(ForeignKey("genomes.id"))
    task: Mapped[str] = mapped_column(Text)
    fidelity: Mapped[str] = mapped_column(Text)
    seed: Mapped[int] = mapped_column(BigInteger)  # 63-bit derived seeds
    individual_id: Mapped[int | None] = mapped_column(ForeignKey("individuals.id"), nullable=True, index=True)
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    metrics: Mapped[Any] = mapped_column(JSONText)
    wall_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    created: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Lineage(Base):
    """A parent → child edge with the operator and the change record that made the child."""

    __tablename__ = "lineage"
    __table_args__ = (UniqueConstraint("child_id", "parent_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    child_id: Mapped[int] = mapped_column(ForeignKey("individuals.id"))
    parent_id: Mapped[int] = mapped_column(ForeignKey("individuals.id"), index=True)
    operator: Mapped[str | None] = mapped_column(Text, nullable=True)
    change: Mapped[Any | None] = mapped_column(JSONText, nullable=True)


class Policy(Base):
    """Meta-policy memory: the credit of an operator in a context (task / region type)."""

    __tablename__ = "policy"
    __table_args__ = (UniqueConstraint("run_id", "operator", "context"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    operator: Mapped[str] = mapped_column(Text)
    context: Mapped[str] = mapped_column(Text)
    successes: Mapped[float] = mapped_column(Float)
    trials: Mapped[float] = mapped_column(Float)


class Archive(Base):
    """The run's current archive of elite genomes (a new run may start from it)."""

    __tablename__ = "archive"
    __table_args__ = (UniqueConstraint("run_id", "genome_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    genome_id: Mapped[str] = mapped_column(ForeignKey("genomes.id"))
    metrics: Mapped[Any] = mapped_column(JSONText)


class Artifact(Base):
    """Trained weights of an individual as safetensors bytes (inline) or a file path.

    ``sha256`` is the digest of the bytes, checked on every read.
    """

    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("individual_id", "kind"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    individual_id: Mapped[int] = mapped_column(ForeignKey("individuals.id"))
    kind: Mapped[str] = mapped_column(Text)
    path: Mapped[str | None] = mapped_column(Text, nullable=True)
    blob: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    sha256: Mapped[str] = mapped_column(String(64))
    created: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Transfer(Base):
    """Fidelity transfer of a multi-fidelity run after generation ``generation`` (0004).

    Over every candidate of generations 0..``generation`` evaluated at both fidelities
    (``lower_fidelity``: the first stage, ``min_steps``; ``higher_fidelity``: the full
    one; canonical JSON like ``evaluations.fidelity``), the rank correlation of their
    qualities: Spearman's ρ and Kendall's τ-b, each with the low and high ends of its
    interval; NULL where undefined (too few candidates, a constant side). The engine
    computes it (``evaluation.transfer``) and writes it with the generation's commit. The
    lower side is what the first stage ranked by (``ranked_by``, 0008): its quality, or its
    held-out loss (negated, so ρ > 0 still means "agrees").
    """

    __tablename__ = "transfer"
    __table_args__ = (UniqueConstraint("run_id", "generation", "lower_fidelity", "higher_fidelity"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    generation: Mapped[int] = mapped_column(Integer)
    lower_fidelity: Mapped[str] = mapped_column(Text)
    higher_fidelity: Mapped[str] = mapped_column(Text)
    n: Mapped[int] = mapped_column(Integer)
    spearman: Mapped[float | None] = mapped_column(Float, nullable=True)
    spearman_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    spearman_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    kendall: Mapped[float | None] = mapped_column(Float, nullable=True)
    kendall_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    kendall_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    # what the lower fidelity ranked by (0008): "quality", or "loss" (its held-out loss, lowest
    # first, the rule a single-objective first stage promotes by)
    ranked_by: Mapped[str] = mapped_column(String(16), server_default="quality")


class LadderRank(Base):
    """An elite individual taken up a size ladder at the end of a run (revision 0005).

    ``evolve run --ladder`` trains each of the run's Pareto elite at several sizes (the
    points are a scale run of their own, ``scale_run_id``), fits ``L(N) = E + A·N^(−α)``
    and ranks the elite by the fitted loss at ``target_params`` (``loss``, with the
    bootstrap interval ``loss_low``..``loss_high``; ``rank`` 1 is the lowest). A ladder that
    cannot determine a fit keeps its row with the fit's columns NULL and the one-line
    reason in ``note``. One row per (run, generation the ladder followed, individual).
    """

    __tablename__ = "ladder_ranks"
    __table_args__ = (UniqueConstraint("run_id", "generation", "individual_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    generation: Mapped[int] = mapped_column(Integer)
    individual_id: Mapped[int] = mapped_column(ForeignKey("individuals.id"))
    scale_run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"), nullable=True)
    target_params: Mapped[float] = mapped_column(Float)
    quality: Mapped[float | None] = mapped_column(Float, nullable=True)  # in the search
    loss: Mapped[float | None] = mapped_column(Float, nullable=True)
    loss_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    loss_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    E: Mapped[float | None] = mapped_column(Float, nullable=True)
    A: Mapped[float | None] = mapped_column(Float, nullable=True)
    alpha: Mapped[float | None] = mapped_column(Float, nullable=True)
    alpha_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    alpha_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    params_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    params_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    rank: Mapped[int | None] = mapped_column(Integer, nullable=True)
    note: Mapped[str] = mapped_column(Text, default="")


class SchemaVersion(Base):
    """The version row of release 0.1, kept as a guard for programs of that release.

    Release 0.1 wrote version 2 here and refuses a store whose version is higher. Since
    Alembic took over (revision 0002) the row holds :data:`LEGACY_SCHEMA_VERSION` and is
    never bumped again; ``alembic_version`` says which revision a store is at.
    """

    __tablename__ = "schema_version"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


class Lease(Base):
    """One attempt at an evaluation while it is (or was) in flight on a worker.

    The driver writes these rows (it is the single writer); workers only send heartbeats to
    the driver. ``expires`` is pushed forward by each heartbeat; a row still ``running`` past
    ``expires`` belongs to an attempt nobody is watching any more (a driver killed mid-way)
    and is reclaimed as ``expired`` by :meth:`Store.reclaim_expired_leases`. The key is the
    evaluation's natural key plus the attempt number. ``genome_id`` has no foreign key: an
    evaluation runs before its generation (and so its genome) is committed.
    """

    __tablename__ = "leases"
    __table_args__ = (
        UniqueConstraint("run_id", "genome_id", "task", "fidelity", "seed", "attempt"),
        Index("ix_leases_state", "state", "expires"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    genome_id: Mapped[str] = mapped_column(String(64))
    task: Mapped[str] = mapped_column(Text)
    fidelity: Mapped[str] = mapped_column(Text)
    seed: Mapped[int] = mapped_column(BigInteger)
    attempt: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    worker: Mapped[str | None] = mapped_column(Text, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    started: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    heartbeat: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires: Mapped[datetime] = mapped_column(UTCDateTime)
