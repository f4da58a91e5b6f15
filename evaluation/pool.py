"""Run evaluations on Ray: one task per candidate, a timeout per candidate, retries for
lost workers, exactly one result per request.

Ray starts once per pool (``with EvaluationPool() as pool``). Locally it is started on
the loopback interface only, without dashboard or usage reporting; with ``ray_address``
the pool joins an existing cluster (one on loopback, such as a test cluster, in Ray's
single-machine mode, see :func:`_loopback_only`) and leaves it running on exit.

Leases. Every attempt at an evaluation holds a lease while it is in flight. The worker
runs a daemon thread that sends a heartbeat (its host, pid and Ray node) every
``heartbeat_s`` seconds to a small Ray actor, the heartbeat board, which keeps the last
beat per attempt on its own clock (no clock skew between machines). The driver, the only
writer, polls the board while it waits for results and decides:

* a beat from a different worker than before: Ray restarted the task after its worker
  died, so the previous attempt is ``lost`` and a new attempt is ``running``;
* no beat for ``lease_s`` seconds (or none at all within ``start_grace_s`` of submission:
  a worker is started and imports torch first): the lease has ``expired`` (a hung,
  stopped or partitioned worker that Ray still believes alive); the task is cancelled
  (its worker killed) and submitted again;
* a result: the lease is ``done``; a ``crash`` whose reason carries
  :data:`TRANSIENT_MARK` (:class:`TransientFailure`) is retried, any other failure is
  final and recorded with its reason.

Attempts of one evaluation, however they ended, number at most ``max_retries + 1``;
after the last, the evaluation is a ``crash`` with the reason, never left running. Each
decision is passed to ``on_lease(LeaseEvent)``; the driver stores them
(``store.LeaseLog``), and a driver that dies leaves leases that expire and are reclaimed
when the run resumes (``Store.reclaim_expired_leases``). Results carry
``torch_threads`` and ``worker_host`` / ``worker_pid`` / ``worker_node`` in their metrics,
so a replay can use the same thread count and a report can say where a candidate ran.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .evaluate import ModelBuilder, evaluate
from .result import EvalRequest, EvalResult

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_GPU_FRACTION = 0.25
# Ray starts worker processes lazily and a fresh one imports torch before it can run
# anything, so the driver's deadline allows this much beyond the request's own timeout
# (which the worker enforces itself, between steps).
DEFAULT_TIMEOUT_GRACE_S = 15.0
_LOCAL_OBJECT_STORE_BYTES = 256 * 1024**2  # results are small; don't reserve 30% of RAM
DEFAULT_HEARTBEAT_S = 2.0
DEFAULT_LEASE_S = 30.0
# A fresh worker process imports torch and our packages before its first beat.
DEFAULT_START_GRACE_S = 120.0
TRANSIENT_MARK = "(transient)"
LEASE_STATES = ("running", "done", "expired", "lost", "cancelled")


class TransientFailure(RuntimeError):
    """Raise this (or a subclass) while building or training to have the pool retry the
    evaluation: the failure is worth another attempt (a flaky file system, a device
    that went away). Any other exception is final: recorded with its reason, not retried.
    """

    def __str__(self) -> str:
        return f"{super().__str__()} {TRANSIENT_MARK}"


def is_transient(result: EvalResult) -> bool:
    return result.status == "crash" and TRANSIENT_MARK in result.reason


@dataclass(frozen=True)
class LeaseEvent:
    """What the driver decided about one attempt (fields as ``store.LeaseIn``)."""

    genome_id: str
    task: str
    fidelity: int
    seed: int
    attempt: int  # 1-based
    state: str  # one of LEASE_STATES
    lease_s: float
    worker: str | None = None
    reason: str | None = None


class HeartbeatBoard:
    """Ray actor: the last heartbeat of every attempt in flight, on the actor's clock."""

    def __init__(self) -> None:
        self._beats: dict[str, tuple[float, str]] = {}

    def beat(self, token: str, worker: str) -> None:
        self._beats[token] = (time.monotonic(), worker)

    def ages(self, tokens: list[str]) -> dict[str, tuple[float, str]]:
        """token -> (seconds since its last beat, worker) for tokens that have beaten."""
        now = time.monotonic()
        return {t: (now - self._beats[t][0], self._beats[t][1]) for t in tokens if t in self._beats}

    def forget(self, tokens: list[str]) -> None:
        for token in tokens:
            self._beats.pop(token, None)


def worker_identity() -> dict[str, Any]:
    """host, pid and Ray node of this process (node None outside Ray)."""
    node = None
    try:
        import ray

        if ray.is_initialized():
            node = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - identity is informative only
        node = None
    return {"worker_host": socket.gethostname(), "worker_pid": os.getpid(), "worker_node": node}


def _identity_text(identity: dict[str, Any]) -> str:
    node = identity.get("worker_node") or "-"
    return f"{identity['worker_host']}:{identity['worker_pid']}@{node[:12]}"


def _evaluate_on_worker(
    request: EvalRequest,
    build_model: ModelBuilder | None,
    torch_threads: int,
    board: Any = None,
    token: str | None = None,
    heartbeat_s: float = DEFAULT_HEARTBEAT_S,
) -> EvalResult:
    """The body of one Ray task (module level, so it pickles by reference)."""
    import torch

    torch.set_num_threads(torch_threads)
    identity = worker_identity()
    stop = threading.Event()
    if board is not None and token is not None:
        text = _identity_text(identity)
        import ray

        # The first beat is waited for: from here on, silence means a hung worker.
        with contextlib.suppress(Exception):
            ray.get(board.beat.remote(token, text), timeout=30)

        def heartbeat() -> None:
            while True:
                with contextlib.suppress(Exception):  # the driver decides what silence means
                    board.beat.remote(token, text)
                if stop.wait(heartbeat_s):
                    return

        threading.Thread(target=heartbeat, name="evolve-heartbeat", daemon=True).start()
    try:
        result = evaluate(request, build_model)
    finally:
        stop.set()
    metrics = {**result.metrics, "torch_threads": torch_threads, **identity}
    return replace(result, metrics=metrics)


class EvaluationPool:
    """Evaluate many requests in parallel on Ray.

    ``workers``: parallel evaluations (default ``os.cpu_count()`` locally, the cluster's
    CPU count when joining one). Each evaluation is one Ray task with ``num_cpus=1``, or
    ``gpu_fraction`` of a GPU when the cluster has GPUs; on CPU each gets
    ``cores // workers`` torch threads. ``timeout_s`` applies to requests whose own
    ``timeout_s`` is None. ``max_retries``: further attempts after a lost worker, an
    expired lease or a transient failure (see the module docstring). ``build_model`` is
    passed to ``evaluate`` on the worker (it must pickle; the default decodes DOGMA
    genomes). ``heartbeat_s`` / ``lease_s`` / ``start_grace_s`` set the leases
    (``lease_s=None`` turns heartbeats off); ``on_lease`` receives every
    :class:`LeaseEvent`.
    """

    def __init__(
        self,
        workers: int | None = None,
        ray_address: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = 2,
        *,
        build_model: ModelBuilder | None = None,
        gpu_fraction: float = DEFAULT_GPU_FRACTION,
        timeout_grace_s: float = DEFAULT_TIMEOUT_GRACE_S,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        lease_s: float | None = DEFAULT_LEASE_S,
        start_grace_s: float = DEFAULT_START_GRACE_S,
        on_lease: Callable[[LeaseEvent], None] | None = None,
    ) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not 0 < gpu_fraction <= 1:
            raise ValueError(f"gpu_fraction must lie in (0, 1], got {gpu_fraction}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if lease_s is not None and not 0 < heartbeat_s < lease_s:
            raise ValueError(f"need 0 < heartbeat_s < lease_s, got {heartbeat_s}, {lease_s}")
        self.workers = workers
        self.ray_address = ray_address
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.build_model = build_model
        self.gpu_fraction = gpu_fraction
        self.timeout_grace_s = timeout_grace_s
        self.heartbeat_s = heartbeat_s
        self.lease_s = lease_s
        self.start_grace_s = start_grace_s
        self.on_lease = on_lease
        self._started_ray = False
        self._remote: Any = None
        self._function: Any = None
        self._options: dict[str, Any] = {}
        self._board: Any = None
        self.slots = 0  # evaluations in flight at once
        self.torch_threads = 1

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> EvaluationPool:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start (or join) Ray and size the pool from the resources it reports."""
        if self._remote is not None:
            return
        ray = _import_ray()
        if not ray.is_initialized():
            if self.ray_address is None:
                with _loopback_only():
                    ray.init(
                        # "local": a fresh instance even when another cluster runs on this
                        # machine (plain ray.init() would silently join that one).
                        address="local",
                        num_cpus=self.workers or os.cpu_count() or 1,
                        include_dashboard=False,
                        _node_ip_address="127.0.0.1",
                        dashboard_host="127.0.0.1",
                        object_store_memory=_LOCAL_OBJECT_STORE_BYTES,
                        log_to_driver=False,
                        logging_level=logging.ERROR,
                    )
            else:
                _check_reachable(self.ray_address)
                # A cluster on loopback is reachable only there, yet Ray rewrites a
                # loopback address to this machine's routable one and then waits for a
                # GCS that never answers: join it in single-machine mode.
                loopback = _is_loopback(self.ray_address)
                with _loopback_only() if loopback else contextlib.nullcontext():
                    ray.init(address=self.ray_address, log_to_driver=False, logging_level=logging.ERROR)
            self._started_ray = self.ray_address is None
        resources = ray.cluster_resources()
        cpus = max(1, int(resources.get("CPU", 1)))
        gpus = resources.get("GPU", 0.0)
        self.slots = min(self.workers or cpus, cpus)
        options: dict[str, Any] = {"num_cpus": 1, "max_retries": self.max_retries}
        if gpus > 0:
            options["num_gpus"] = self.gpu_fraction
            self.slots = min(self.slots, max(1, int(gpus / self.gpu_fraction)))
        cores = (os.cpu_count() or 1) if self._started_ray else cpus
        self.torch_threads = max(1, cores // self.slots)
        self._function, self._options = ray.remote(_evaluate_on_worker), options
        self._remote = self._function.options(**options)
        if self.lease_s is not None:
            self._board = ray.remote(num_cpus=0, max_restarts=-1)(HeartbeatBoard).remote()

    def close(self) -> None:
        """Shut Ray down if this pool started it; a joined cluster keeps running."""
        if self._remote is None:
            return
        self._remote = None
        if self._board is not None:
            import ray

            with contextlib.suppress(Exception):
                ray.kill(self._board)
            self._board = None
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False

    # -- evaluation ------------------------------------------------------------------

    def evaluate(
        self,
        requests: Sequence[EvalRequest],
        on_result: Callable[[EvalResult], None] | None = None,
    ) -> list[EvalResult]:
        """Evaluate ``requests``; return one result per request, in request order.

        ``on_result(result)`` is called in the driver as each evaluation finishes, in
        completion order. At most ``slots`` evaluations are in flight, so a candidate's
        deadline (its timeout plus ``timeout_grace_s``) runs from when it can start; a
        candidate past its deadline is cancelled (its worker killed) and reported as
        ``timeout``. Lost workers, expired leases and transient failures are retried
        (module docstring); after ``max_retries + 1`` attempts the result is ``crash``.
        """
        import ray

        if self._remote is None:
            raise RuntimeError("EvaluationPool is not started; use it as a context manager")
        results: list[EvalResult | None] = [None] * len(requests)
        attempts = [0] * len(requests)
        waiting = deque(enumerate(requests))
        running: dict[Any, _Flight] = {}
        poll_s = self.heartbeat_s if self._board is not None else None

        def record(index: int, result: EvalResult) -> None:
            results[index] = result
            if on_result is not None:
                on_result(result)

        def lease(flight: _Flight, state: str, reason: str | None = None) -> None:
            if self.on_lease is None or self._board is None:
                return
            request = flight.request
            self.on_lease(
                LeaseEvent(
                    request.genome_id,
                    request.task,
                    request.fidelity,
                    request.seed,
                    flight.attempt,
                    state,
                    float(self.lease_s or 0),
                    flight.worker,
                    reason,
                )
            )

        def submit(index: int, request: EvalRequest) -> None:
            attempts[index] += 1
            if request.timeout_s is None:
                request = replace(request, timeout_s=self.timeout_s)
            limit = float(request.timeout_s)
            token = uuid.uuid4().hex
            remote = self._remote
            if attempts[index] > 1:  # Ray's own restarts count against the same budget
                remote = self._function.options(
                    **{**self._options, "max_retries": max(0, self.max_retries + 1 - attempts[index])}
                )
            ref = remote.remote(
                request, self.build_model, self.torch_threads, self._board, token, self.heartbeat_s
            )
            now = time.monotonic()
            flight = _Flight(
                index, request, limit, now + limit + self.timeout_grace_s, attempts[index], token, now
            )
            running[ref] = flight
            lease(flight, "running")

        def retry_or_fail(ref: Any, flight: _Flight, state: str, reason: str) -> None:
            """End this attempt as ``state``; submit another or record the final crash."""
            del running[ref]
            lease(flight, state, reason)
            if attempts[flight.index] <= self.max_retries:
                submit(flight.index, requests[flight.index])
            else:
                tries = attempts[flight.index]
                record(
                    flight.index,
                    EvalResult.for_request(
                        requests[flight.index],
                        "crash",
                        f"{reason}; gave up after {tries} attempt{'s' * (tries > 1)}",
                    ),
                )

        try:
            while waiting or running:
                while waiting and len(running) < self.slots:
                    submit(*waiting.popleft())

                now = time.monotonic()
                wake = min(f.deadline for f in running.values())
                if poll_s is not None:
                    wake = min(wake, now + poll_s)
                ready, _ = ray.wait(list(running), num_returns=1, timeout=max(0.0, wake - now))
                if ready:  # collect everything finished by now, not just the first
                    ready, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
                for ref in ready:
                    flight = running[ref]
                    result = self._fetch(ref, requests[flight.index])
                    if is_transient(result):
                        retry_or_fail(ref, flight, "lost", f"transient failure: {result.reason}")
                        continue
                    del running[ref]
                    lease(flight, "done", None if result.ok else f"{result.status}: {result.reason}")
                    record(flight.index, result)

                if self._board is not None and running:
                    self._check_leases(running, attempts, lease, retry_or_fail)

                now = time.monotonic()
                for ref, flight in list(running.items()):
                    if now < flight.deadline:
                        continue
                    del running[ref]
                    ray.cancel(ref, force=True)
                    reason = (
                        f"no result within {flight.limit:g}s (+{self.timeout_grace_s:g}s grace); "
                        "worker killed"
                    )
                    lease(flight, "cancelled", reason)
                    record(
                        flight.index,
                        EvalResult.for_request(
                            requests[flight.index],
                            "timeout",
                            reason,
                            wall_seconds=flight.limit + self.timeout_grace_s,
                        ),
                    )
        finally:
            for ref, flight in running.items():  # on_result raised or KeyboardInterrupt
                ray.cancel(ref, force=True)
                with contextlib.suppress(Exception):
                    lease(flight, "cancelled", "the driver stopped waiting")
        return [result for result in results if result is not None]

    def _check_leases(
        self,
        running: dict[Any, _Flight],
        attempts: list[int],
        lease: Callable[..., None],
        retry_or_fail: Callable[[Any, _Flight, str, str], None],
    ) -> None:
        """Read the heartbeat board; expire silent attempts, notice restarted ones."""
        import ray

        assert self.lease_s is not None
        tokens = [f.token for f in running.values()]
        try:
            ages = ray.get(self._board.ages.remote(tokens), timeout=max(10.0, self.lease_s))
        except Exception as error:  # noqa: BLE001 - the board restarts; judge next time
            logger.warning("heartbeat board unavailable: %s", error)
            return
        now = time.monotonic()
        for ref, flight in list(running.items()):
            beat = ages.get(flight.token)
            if beat is not None:
                age, worker = beat
                if flight.worker is not None and worker != flight.worker:
                    # Ray ran the task again on a new worker: the old one died.
                    lease(flight, "lost", f"worker {flight.worker} lost; Ray restarted the task")
                    attempts[flight.index] += 1
                    flight.attempt = attempts[flight.index]
                    flight.worker = worker
                    flight.renewed = now
                    lease(flight, "running")
                elif flight.worker is None or now - flight.renewed >= self.lease_s / 3:
                    flight.worker = worker
                    flight.renewed = now
                    lease(flight, "running")
                silent = age > self.lease_s
                why = f"lease expired: no heartbeat for {age:.0f}s (lease {self.lease_s:g}s)"
            else:
                silent = now - flight.submitted > self.start_grace_s
                why = f"lease expired: no heartbeat within {self.start_grace_s:g}s of starting"
            if silent:
                ray.cancel(ref, force=True)
                with contextlib.suppress(Exception):
                    self._board.forget.remote([flight.token])
                retry_or_fail(ref, flight, "expired", why)

    def _fetch(self, ref: Any, request: EvalRequest) -> EvalResult:
        import ray
        from ray import exceptions

        try:
            result = ray.get(ref)
        except exceptions.OutOfMemoryError as error:  # killed by Ray's memory monitor
            return EvalResult.for_request(request, "oom", f"Ray memory monitor: {error}")
        except (exceptions.WorkerCrashedError, exceptions.NodeDiedError) as error:
            return EvalResult.for_request(
                request,
                "crash",
                f"worker lost {self.max_retries + 1} times: {type(error).__name__}: {error}",
            )
        except exceptions.TaskCancelledError:
            return EvalResult.for_request(request, "timeout", "cancelled")
        except Exception as error:  # RayTaskError (e.g. unpicklable builder) and the rest
            return EvalResult.for_request(request, "crash", f"{type(error).__name__}: {error}")
        if not isinstance(result, EvalResult):
            return EvalResult.for_request(request, "crash", f"worker returned {type(result).__name__}")
        return result


@dataclass
class _Flight:
    """One attempt in flight: its request, time limit, deadline and lease."""

    index: int
    request: EvalRequest
    limit: float
    deadline: float
    attempt: int
    token: str
    submitted: float
    worker: str | None = None
    renewed: float = 0.0


def _import_ray():
    """Import Ray with usage reporting off (it would otherwise try to phone home)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a cluster address (``host:port``, ``ray://host:port``); None for
    ``auto`` and other forms without a port."""
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not (port.isascii() and port.isdigit()):
        return None
    return host.strip("[]"), int(port)


def _is_loopback(address: str) -> bool:
    """Whether a cluster address names this machine's loopback interface."""
    host = (_host_port(address) or ("", 0))[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Raise ConnectionError unless something accepts connections at ``address``: Ray
    itself waits minutes for a cluster that is not there."""
    host_port = _host_port(address)
    if host_port is None:
        return
    try:
        socket.create_connection(host_port, timeout=timeout_s).close()
    except OSError as error:
        raise ConnectionError(f"no Ray cluster answers at {address}: {error}") from None


@contextlib.contextmanager
def _loopback_only():
    """Keep a locally started Ray on 127.0.0.1.

    On Linux, Ray turns a requested node address of 127.0.0.1 into the machine's routable
    address and binds its servers there or on all interfaces (ray-project/ray#26293). Its
    single-machine mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read into
    ``ray_constants.ENABLE_RAY_CLUSTER`` at import) keeps the node address, and with it
    GCS, raylet, workers and agents, on loopback; checked with ``ss -ltn``. It is only
    needed while the node starts, and is undone afterwards so that the process can still
    join a real cluster later.
    """
    from ray._private import ray_constants

    name = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
    saved_env, saved_flag = os.environ.get(name), getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[name] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if saved_env is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved_env
        if saved_flag is not None:
            ray_constants.ENABLE_RAY_CLUSTER = saved_flag
