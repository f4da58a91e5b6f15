"""The driver's bookkeeping for one :meth:`EvaluationPool.evaluate` call.

A :class:`Dispatch` holds everything one call tracks: the requests still waiting for a
slot, the attempts in flight (:class:`Flight`, keyed by their Ray object ref), the
number of attempts made per request, and the results so far. :meth:`Dispatch.run` loops
until every request has exactly one result:

1. :meth:`~Dispatch.admit` waiting requests while fewer than ``pool.slots`` are in flight
   and, on GPUs, their share (``pool.gpu_share``) fits beside the shares in flight;
2. :meth:`~Dispatch.wait` for a finished task, the earliest deadline or the next poll;
3. :meth:`~Dispatch.on_done` for every finished task (a transient or an environment
   failure is retried);
4. :meth:`~Dispatch.poll` the heartbeat board (when leases are on): renew beating
   leases, :meth:`~Dispatch.on_lost` for tasks Ray restarted on a new worker,
   :meth:`~Dispatch.on_expired` for silent ones (cancelled, then retried);
5. :meth:`~Dispatch.on_timeout` for flights past their deadline (cancelled).

Time limits: with heartbeats, a flight's deadline is what the worker's last beat said its own
limit had left, plus ``pool.timeout_grace_s`` (the worker's limit starts at the request's
``timeout_s`` and grows with the candidate's measured pace, `trainer.Deadline`); before the
first beat, the request's ``timeout_s`` plus the start grace and the timeout grace from
submission. Without heartbeats, ``timeout_s`` plus the timeout grace from submission. A request
that times out, by the worker's limit or the driver's deadline, is tried once more with
``TIMEOUT_RETRY_FACTOR`` times its limit before its ``timeout`` is final: a slow but healthy
candidate gets a second chance, a hung one is still stopped.

Environment failures (`evaluation.environment`): a result the worker marked (an import
error, a full disk, a foreign module ...), a Ray error whose cause is one (the task could not
even be unpickled on its worker), and a request whose every attempt was lost or expired (a
dead node, a worker killed each time) end as a ``crash`` whose reason starts with
``ENVIRONMENT_MARK``: retried like a transient failure, on another Ray node than the ones
where the request failed so when the cluster has one, then final, for the engine to stop on
(`evolution.evaluating`) rather than record.

Every decision about an attempt is reported through ``pool.on_lease`` as a
``store.LeaseIn`` (module docstring of :mod:`evaluation.pool` for the rules). If the
loop is left by an exception (``on_result`` or ``on_lease`` raised, KeyboardInterrupt),
:meth:`~Dispatch.abandon` cancels what is still in flight.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from dogma_evolve.store import LeaseIn

from .environment import ENVIRONMENT_MARK, environment_cause, environment_reason, is_environment
from .result import EvalRequest, EvalResult
from .worker import is_transient

logger = logging.getLogger(__name__)

#: how a result begins when Ray itself lost the worker on every one of its attempts (final)
RAY_GAVE_UP = f"{ENVIRONMENT_MARK} worker lost"
TIMEOUT_RETRY_FACTOR = 4.0  # a timed-out request's one further attempt gets this many times its limit

#: A ``ray.ObjectRef`` (Ray is imported lazily, only once a pool starts).
ObjectRef = Any


class Launcher(Protocol):
    """What a :class:`Dispatch` needs of its pool (`evaluation.pool.EvaluationPool`): the
    settings it reads, the heartbeat board and how to submit one attempt."""

    slots: int
    gpus: float
    timeout_s: float
    timeout_grace_s: float
    heartbeat_s: float
    start_grace_s: float
    lease_s: float | None
    max_retries: int
    on_lease: Callable[[LeaseIn], None] | None

    @property
    def board(self) -> Any:
        """The HeartbeatBoard actor; None when heartbeats and leases are off."""
        ...

    def gpu_share(self, request: EvalRequest) -> float:
        """The share of one GPU that ``request`` holds (0 without GPUs)."""
        ...

    def launch(
        self, request: EvalRequest, token: str, attempt: int, avoid: frozenset[str] = frozenset()
    ) -> ObjectRef:
        """Submit attempt ``attempt`` (1-based) of ``request`` as the task named ``token``,
        on a node outside ``avoid`` (Ray node ids) where there is one."""
        ...


@dataclass
class Flight:
    """One attempt in flight.

    ``request``: the request with its ``timeout_s`` filled in; ``limit``: that timeout
    (s); ``deadline``: the ``time.monotonic()`` after which the driver kills the task;
    ``attempt``: 1-based, Ray's own restarts included; ``token``: the attempt's name on
    the heartbeat board; ``submitted``: monotonic submission time; ``worker``: identity
    of the last beat (None before the first); ``renewed``: monotonic time the lease was
    last reported ``running`` after a beat.
    """

    index: int  # into the requests of the evaluate call
    request: EvalRequest
    limit: float
    deadline: float
    attempt: int
    token: str
    submitted: float
    worker: str | None = None
    renewed: float = 0.0
    gpu: float = 0.0  # the share of a GPU it holds (pool.gpu_share)


class Dispatch:
    """Evaluate ``requests`` on ``pool`` (started): :meth:`run` returns one result per
    request, in request order, calling ``on_result`` in completion order."""

    def __init__(
        self,
        pool: Launcher,
        requests: Sequence[EvalRequest],
        on_result: Callable[[EvalResult], None] | None = None,
    ) -> None:
        self.pool = pool  # read-only here: settings, slots, on_lease, how to launch a task
        self.board = pool.board  # a HeartbeatBoard actor; None: heartbeats and leases off
        self.requests = list(requests)  # a retried timeout's request carries its larger limit
        self.timeout_retried: set[int] = set()
        self.on_result = on_result
        self.results: list[EvalResult | None] = [None] * len(requests)
        self.attempts = [0] * len(requests)
        # per request, the Ray nodes where it failed for its environment: a retry goes elsewhere
        self.failed_on: list[set[str]] = [set() for _ in requests]
        self.waiting = deque(range(len(requests)))
        self.flights: dict[ObjectRef, Flight] = {}

    def run(self) -> list[EvalResult]:
        """Loop until every request has its result (module docstring); return them."""
        try:
            while self.waiting or self.flights:
                self.admit()
                for ref in self.wait():
                    self.on_done(ref)
                if self.board is not None and self.flights:
                    self.poll()
                now = time.monotonic()
                for ref in [ref for ref, flight in self.flights.items() if now >= flight.deadline]:
                    self.on_timeout(ref)
        finally:
            self.abandon()
        return [result for result in self.results if result is not None]

    # -- steps of the loop -----------------------------------------------------------

    def admit(self) -> None:
        """Submit waiting requests, first fit in request order, while a slot is free and each
        one's GPU share fits beside the shares in flight (``pool.gpus`` in all); a request
        that does not fit waits and smaller ones behind it go first. With nothing in flight
        the first waiting request goes whatever its share, so nothing waits forever."""
        for index in list(self.waiting):
            if len(self.flights) >= self.pool.slots:
                return
            share = self.pool.gpu_share(self.requests[index])
            in_flight = sum(flight.gpu for flight in self.flights.values())
            if self.flights and in_flight + share > self.pool.gpus + 1e-9:
                continue
            self.waiting.remove(index)
            self.submit(index)

    def submit(self, index: int) -> None:
        """Start a new attempt at request ``index``; its lease is ``running``."""
        self.attempts[index] += 1
        request = self.requests[index]
        limit = float(self.pool.timeout_s if request.timeout_s is None else request.timeout_s)
        if request.timeout_s is None:
            request = replace(request, timeout_s=self.pool.timeout_s)
        token = uuid.uuid4().hex
        ref = self.pool.launch(request, token, self.attempts[index], frozenset(self.failed_on[index]))
        now = time.monotonic()
        # with heartbeats, the limit runs from the worker's first beat (a fresh worker first
        # imports torch, slowly on a loaded machine): until then, the start grace on top
        starting = self.pool.start_grace_s if self.board is not None else 0.0
        deadline = now + starting + limit + self.pool.timeout_grace_s
        flight = Flight(index, request, limit, deadline, self.attempts[index], token, now)
        flight.gpu = self.pool.gpu_share(request)
        self.flights[ref] = flight
        self.lease(flight, "running")

    def wait(self) -> list[ObjectRef]:
        """Block until a task finishes, the earliest deadline passes or (leases on) a
        poll of the board is due; return every task finished by then."""
        import ray

        refs = list(self.flights)
        now = time.monotonic()
        wake = min(flight.deadline for flight in self.flights.values())
        if self.board is not None:
            wake = min(wake, now + self.pool.heartbeat_s)
        ready, _ = ray.wait(refs, num_returns=1, timeout=max(0.0, wake - now))
        if ready:  # collect everything finished by now, not just the first
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        return list(ready)

    def on_done(self, ref: ObjectRef) -> None:
        """A task finished: retry a transient or an environment failure, else close the
        lease ``done`` and record the result (ok or a final failure)."""
        flight = self.flights[ref]
        result = fetch_result(ref, self.requests[flight.index], self.pool.max_retries)
        if is_transient(result):
            self.retry_or_fail(ref, "lost", f"transient failure: {result.reason}")
            return
        if is_environment(result) and not result.reason.startswith(RAY_GAVE_UP):
            node = result.metrics.get("worker_node")
            if isinstance(node, str):
                self.failed_on[flight.index].add(node)
            self.retry_or_fail(ref, "lost", result.reason)  # the reason keeps the mark, the final crash too
            return
        del self.flights[ref]
        if result.status == "timeout" and self.retry_timeout(flight, result.reason):
            return
        self.lease(flight, "done", None if result.ok else f"{result.status}: {result.reason}")
        self.record(flight.index, result)

    def poll(self) -> None:
        """Read the heartbeat board once and judge every flight by its last beat: renew
        the lease, notice a restart on another worker, or expire it when silent."""
        import ray

        lease_s, start_grace_s = self._lease_s(), self.pool.start_grace_s
        tokens = [flight.token for flight in self.flights.values()]
        try:
            ages = ray.get(self.board.ages.remote(tokens), timeout=max(10.0, lease_s))
        except Exception as error:  # noqa: BLE001 - the board restarts; judge next time
            logger.warning("heartbeat board unavailable: %s", error)
            return
        now = time.monotonic()
        for ref, flight in list(self.flights.items()):
            beat = ages.get(flight.token)
            if beat is None:  # a fresh worker imports torch before its first beat
                if now - flight.submitted > start_grace_s:
                    self.on_expired(ref, f"lease expired: no heartbeat within {start_grace_s:g}s of starting")
                continue
            age, worker, remaining = beat
            if remaining is not None:  # the worker's own limit (grown with its pace): wait as long
                flight.deadline = now - age + remaining + self.pool.timeout_grace_s
            if flight.worker is not None and worker != flight.worker:
                self.on_lost(flight, worker, now)
            elif flight.worker is None or now - flight.renewed >= lease_s / 3:
                self.renew(flight, worker, now)
            if age > lease_s:
                self.on_expired(ref, f"lease expired: no heartbeat for {age:.0f}s (lease {lease_s:g}s)")

    def on_timeout(self, ref: ObjectRef) -> None:
        """A flight passed its deadline: kill it; try once more with a larger limit, else
        record a final ``timeout``."""
        import ray

        flight = self.flights.pop(ref)
        ray.cancel(ref, force=True)
        grace = self.pool.timeout_grace_s
        reason = f"no result within {flight.limit:g}s (+{grace:g}s grace); worker killed"
        if self.retry_timeout(flight, reason):
            return
        self.lease(flight, "cancelled", reason)
        timeout = EvalResult.for_request(
            self.requests[flight.index], "timeout", reason, wall_seconds=flight.limit + grace
        )
        self.record(flight.index, timeout)

    def abandon(self) -> None:
        """Cancel every flight left (nothing after a normal end) and close its lease."""
        import ray

        for ref, flight in self.flights.items():
            ray.cancel(ref, force=True)
            with contextlib.suppress(Exception):
                self.lease(flight, "cancelled", "the driver stopped waiting")

    # -- what the board tells --------------------------------------------------------

    def renew(self, flight: Flight, worker: str, now: float) -> None:
        """``worker`` beat for ``flight``: its lease is ``running`` again from ``now``."""
        flight.worker = worker
        flight.renewed = now
        self.lease(flight, "running")

    def on_lost(self, flight: Flight, worker: str, now: float) -> None:
        """Ray ran the task again on ``worker`` after its previous worker died: that
        attempt is ``lost`` and this one (same ref, same token) a new attempt."""
        self.lease(flight, "lost", f"worker {flight.worker} lost; Ray restarted the task")
        self.attempts[flight.index] += 1
        flight.attempt = self.attempts[flight.index]
        self.renew(flight, worker, now)

    def on_expired(self, ref: ObjectRef, reason: str) -> None:
        """A flight fell silent (hung, stopped or cut off): kill it and try again."""
        import ray

        flight = self.flights[ref]
        ray.cancel(ref, force=True)
        with contextlib.suppress(Exception):
            self.board.forget.remote([flight.token])
        self.retry_or_fail(ref, "expired", reason)

    # -- outcomes --------------------------------------------------------------------

    def retry_timeout(self, flight: Flight, reason: str) -> bool:
        """The first timeout of a request: close this attempt ``cancelled`` and submit one
        more with ``TIMEOUT_RETRY_FACTOR`` times its limit (True); False after that."""
        if flight.index in self.timeout_retried:
            return False
        self.timeout_retried.add(flight.index)
        limit = flight.limit * TIMEOUT_RETRY_FACTOR
        self.lease(flight, "cancelled", f"{reason}; tried again with a {limit:g}s limit")
        self.requests[flight.index] = replace(flight.request, timeout_s=limit)
        self.submit(flight.index)
        return True

    def retry_or_fail(self, ref: ObjectRef, state: str, reason: str) -> None:
        """End this attempt as ``state``; submit another while attempts remain
        (``max_retries + 1`` in all), else record the final ``crash``: an environment
        failure when every attempt was lost or expired (a dead node, a worker killed each
        time: no genome's doing) or failed for its environment."""
        flight = self.flights.pop(ref)
        self.lease(flight, state, reason)
        tries = self.attempts[flight.index]
        if tries - (flight.index in self.timeout_retried) <= self.pool.max_retries:
            self.submit(flight.index)
            return
        reason = f"{reason}; gave up after {tries} attempt{'s' * (tries > 1)}"
        if state in ("lost", "expired") and not reason.startswith(("transient failure", ENVIRONMENT_MARK)):
            reason = environment_reason(reason)
        self.record(flight.index, EvalResult.for_request(self.requests[flight.index], "crash", reason))

    def record(self, index: int, result: EvalResult) -> None:
        """The final result of request ``index``, passed on to ``on_result``."""
        self.results[index] = result
        if self.on_result is not None:
            self.on_result(result)

    def lease(self, flight: Flight, state: str, reason: str | None = None) -> None:
        """Report ``flight``'s lease in ``state`` to ``pool.on_lease`` (leases on only)."""
        on_lease = self.pool.on_lease
        if on_lease is None or self.board is None:
            return
        request = flight.request
        on_lease(
            LeaseIn(
                genome_id=request.genome_id,
                task=request.task,
                fidelity=request.fidelity,
                seed=request.seed,
                attempt=flight.attempt,
                state=state,
                lease_s=self._lease_s(),
                worker=flight.worker,
                reason=reason,
            )
        )

    def _lease_s(self) -> float:
        return float(self.pool.lease_s) if self.pool.lease_s is not None else 0.0


def fetch_result(ref: ObjectRef, request: EvalRequest, max_retries: int) -> EvalResult:
    """The result of a finished task; Ray's errors become failure results of ``request``
    (``oom`` from Ray's memory monitor, ``timeout`` for a cancelled task, an environment
    failure for a worker lost ``max_retries + 1`` times or an error whose cause is
    environmental, ``crash`` for any other error)."""
    import ray
    from ray import exceptions

    try:
        result = ray.get(ref)
    except exceptions.OutOfMemoryError as error:  # killed by Ray's memory monitor
        return EvalResult.for_request(request, "oom", f"Ray memory monitor: {error}")
    except (exceptions.WorkerCrashedError, exceptions.NodeDiedError) as error:  # a dead node
        lost = f"worker lost {max_retries + 1} times: {type(error).__name__}: {error}"
        return EvalResult.for_request(request, "crash", environment_reason(lost))
    except exceptions.TaskCancelledError:
        return EvalResult.for_request(request, "timeout", "cancelled")
    except Exception as error:  # RayTaskError (e.g. unpicklable builder) and the rest
        cause = environment_cause(error)  # e.g. the task's own module not importable there
        if cause is not None:
            reason = environment_reason(f"{cause} (before the task ran)")
            return EvalResult.for_request(request, "crash", reason)
        return EvalResult.for_request(request, "crash", f"{type(error).__name__}: {error}")
    if not isinstance(result, EvalResult):
        return EvalResult.for_request(request, "crash", f"worker returned {type(result).__name__}")
    return result
