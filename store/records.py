"""Plain values that go into and come out of the store; no ORM object leaves a session.

A reference to an individual inside :meth:`Store.commit_generation` is a :data:`Ref`:
``("slot", n)`` for the individual born in slot ``n`` of the generation being committed
(its id does not exist yet), ``("id", n)`` for an individual committed earlier.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

Ref = tuple[Literal["slot", "id"], int]
Fidelity = int | str


class StoreError(Exception):
    """Anything the store refuses or cannot do; the message is one line."""


def by_slot(slot: int) -> Ref:
    """Reference to the individual born in ``slot`` of the generation being committed."""
    return ("slot", slot)


def by_id(individual_id: int) -> Ref:
    """Reference to an individual committed in an earlier generation."""
    return ("id", individual_id)


class GenomeIn(NamedTuple):
    """A genome to store (a plain ``(id, yaml, sequence)`` tuple works too)."""

    id: str
    yaml: str
    sequence: str


@dataclass(frozen=True)
class IndividualIn:
    """A birth in the generation being committed. ``operator`` is None for seeds."""

    slot: int
    genome_id: str
    seed: int
    operator: str | None = None
    change: Any = None


@dataclass(frozen=True)
class EvaluationIn:
    """One evaluation result; ``individual`` is the birth that was evaluated, if any."""

    genome_id: str
    task: str
    fidelity: Fidelity
    seed: int
    status: str
    metrics: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    wall_seconds: float | None = None
    individual: Ref | None = None


@dataclass(frozen=True)
class LineageIn:
    """Edge parent → child; the child is born in this generation (given by its slot)."""

    child: int
    parent: Ref
    operator: str | None = None
    change: Any = None


@dataclass(frozen=True)
class PolicyIn:
    """The credit of ``operator`` in ``context`` (absolute values, not increments)."""

    operator: str
    context: str
    successes: float
    trials: float


@dataclass(frozen=True)
class ArchiveIn:
    """An elite genome of the run and the metrics that put it there."""

    genome_id: str
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TransferIn:
    """Fidelity transfer after the generation being committed: the rank correlation of the
    qualities at ``lower_fidelity`` and ``higher_fidelity`` over the ``n`` candidates of the
    run so far measured at both (``evaluation.transfer.rank_transfer``); None: undefined.
    ``ranked_by``: what ranks the lower side, one of :data:`store.RANKED_BY` (``"loss"``: the
    negated held-out loss, the rule a first stage promotes by)."""

    lower_fidelity: Fidelity
    higher_fidelity: Fidelity
    n: int
    spearman: float | None = None
    spearman_low: float | None = None
    spearman_high: float | None = None
    kendall: float | None = None
    kendall_low: float | None = None
    kendall_high: float | None = None
    ranked_by: str = "quality"  # the lower side: "quality", or "loss" (negated held-out loss)


@dataclass(frozen=True)
class LeaseIn:
    """The driver's news about one attempt of an evaluation: the store's lease record type.

    Import it as ``from store import LeaseIn``. The evaluation pool hands one to its
    ``on_lease`` callback for every decision, and :class:`store.LeaseLog` (or
    :meth:`store.Store.update_leases`) upserts it by its key: the evaluation's natural key
    ``(genome_id, task, fidelity, seed)`` within the run, plus ``attempt``.

    * ``genome_id``, ``task``, ``fidelity``, ``seed``: the evaluation, as in
      :class:`EvaluationIn` (``fidelity`` an int level or a name);
    * ``attempt``: 1 for the first try of that evaluation, 2 for its first retry, ...;
    * ``state``: one of :data:`store.LEASE_STATES` (running, done, expired, lost,
      cancelled); anything but running is final, a later update of that attempt is ignored;
    * ``lease_s``: a running lease expires this many seconds after the update unless the
      next one renews it;
    * ``worker``: who runs the attempt (kept when None is sent later);
    * ``reason``: why the attempt ended, for lost / expired / cancelled (kept when None).
    """

    genome_id: str
    task: str
    fidelity: Fidelity
    seed: int
    attempt: int
    state: str
    lease_s: float = 60.0
    worker: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class LeaseRecord:
    """A stored lease: the last news of an attempt and when it started, beat and expires."""

    run_id: str
    genome_id: str
    task: str
    fidelity: Fidelity
    seed: int
    attempt: int
    state: str
    worker: str | None
    reason: str | None
    started: datetime
    heartbeat: datetime
    expires: datetime


@dataclass(frozen=True)
class RunRecord:
    """A stored run; ``kind`` is one of :data:`store.RUN_KINDS` (search, scale, ablate, calibrate, select).

    ``status`` is the stored one; ``shown_status`` is what readers show (``interrupted`` for
    a ``running`` run nobody drives: no heartbeat, or one older than the stale limit), see
    :mod:`store.liveness`. ``driver`` / ``heartbeat``: who holds the run and when it last
    beat (None: nobody).
    """

    id: str
    status: str
    kind: str
    created: datetime
    seed: int
    task: str
    config: dict[str, Any]
    last_generation: int
    generations: int  # committed generations: last_generation + 1
    evaluated: int  # evaluation rows of the run
    stop_reason: str | None = None  # why the run ended, once it has
    heartbeat: datetime | None = None  # its driver's last heartbeat (revision 0007)
    driver: str | None = None  # the token of the driver holding it

    @property
    def shown_status(self) -> str:
        """The stored status, or ``interrupted`` for a ``running`` run whose driver is not
        alive now (:func:`store.liveness.shown_status` with the default stale limit, or a
        driver process of this host that is gone: :func:`store.liveness.gone_here`)."""
        from dogma_evolve.store.liveness import INTERRUPTED, driver_alive, shown_status  # liveness imports us

        if self.status == "running" and self.driver is not None:
            return self.status if driver_alive(self.driver, self.heartbeat) else INTERRUPTED
        return shown_status(self.status, self.heartbeat)


@dataclass(frozen=True)
class EvaluationRecord:
    id: int
    run_id: str
    genome_id: str
    task: str
    fidelity: Fidelity
    seed: int
    individual_id: int | None
    status: str
    reason: str | None
    metrics: dict[str, Any]
    wall_seconds: float | None
    created: datetime


@dataclass(frozen=True)
class IndividualRecord:
    """A birth with its genome, parents and evaluations.

    ``evaluations`` are all evaluations of this genome in this run (any task, fidelity,
    seed), oldest first; ``evaluation`` is the newest of them on the run's task, or None
    when the genome has not been evaluated there yet.
    """

    id: int
    run_id: str
    generation: int
    slot: int
    genome_id: str
    yaml: str
    sequence: str
    seed: int
    operator: str | None
    change: Any
    parents: list[int]
    evaluation: EvaluationRecord | None
    evaluations: list[EvaluationRecord]

    @property
    def status(self) -> str | None:
        """Evaluation status on the run's task; None means not evaluated yet."""
        return None if self.evaluation is None else self.evaluation.status

    @property
    def metrics(self) -> dict[str, Any] | None:
        return None if self.evaluation is None else self.evaluation.metrics


@dataclass(frozen=True)
class ParentEdge:
    parent_id: int
    operator: str | None
    change: Any


@dataclass(frozen=True)
class AncestryStep:
    """One individual on the way back to the seeds; ``depth`` 0 is the one asked about.

    A seed has no ``parents``. ``operator`` / ``change`` are those of the individual's
    birth; each parent edge carries its own (a crossover child has two).
    """

    individual_id: int
    depth: int
    run_id: str
    generation: int
    slot: int
    genome_id: str
    operator: str | None
    change: Any
    parents: list[ParentEdge]


@dataclass(frozen=True)
class PolicyRecord:
    operator: str
    context: str
    successes: float
    trials: float


@dataclass(frozen=True)
class TransferRecord:
    """A stored fidelity transfer (see :class:`TransferIn`), cumulative up to ``generation``."""

    run_id: str
    generation: int
    lower_fidelity: Fidelity
    higher_fidelity: Fidelity
    n: int
    spearman: float | None
    spearman_low: float | None
    spearman_high: float | None
    kendall: float | None
    kendall_low: float | None
    kendall_high: float | None
    ranked_by: str


@dataclass(frozen=True)
class ArchiveRecord:
    genome_id: str
    yaml: str
    sequence: str
    metrics: dict[str, Any]
