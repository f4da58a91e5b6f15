"""Run evaluations on Ray: one task per candidate, a timeout per candidate, retries for
lost workers, exactly one result per request.

Ray starts once per pool (``with EvaluationPool() as pool``). Locally it is started on
the loopback interface only, without dashboard or usage reporting, its workers at the
driver's own niceness (:mod:`evaluation.niceness`, not Ray's 15 lower); with ``ray_address``
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
decision is passed to ``on_lease`` as a ``store.LeaseIn``; the driver stores them
(``store.LeaseLog``), and a driver that dies leaves leases that expire and are reclaimed
when the run resumes (``Store.reclaim_expired_leases``). Results carry
``torch_threads`` and ``worker_host`` / ``worker_pid`` / ``worker_node`` in their metrics,
so a replay can use the same thread count and a report can say where a candidate ran.

GPUs. On a cluster with GPUs each candidate asks Ray for a fraction of one GPU sized from
its estimated training memory (:mod:`evaluation.gpu`: ``GpuShares``, a grid of 1/16), so
small candidates share a GPU densely and a large one gets what it needs; the driver submits
a candidate only while the shares in flight fit the GPUs, and caps each one's allocator at
its share (:meth:`EvaluationPool.within_share`). One GPU's memory is probed once
at start (a Ray task reading ``nvidia-smi``) unless ``gpu_bytes`` is given; if the probe
fails every candidate asks for ``gpu_fraction``.

The worker's side (task body, heartbeat thread, board actor) is :mod:`evaluation.worker`;
the driver's bookkeeping of one ``evaluate`` call is :class:`evaluation.dispatch.Dispatch`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from dogma_evolve.store import LeaseIn

from .dispatch import Dispatch, ObjectRef
from .evaluate import ModelBuilder
from .gpu import PACKING_GRID, PROCESS_BYTES, GpuShares, probe_gpu_bytes
from .niceness import worker_niceness
from .protocol import HeartbeatBoard
from .result import EvalRequest, EvalResult
from .worker import (
    DEFAULT_HEARTBEAT_S,
    TRANSIENT_MARK,
    TransientFailure,
    evaluate_on_worker,
    is_transient,
    worker_identity,
)

__all__ = [
    "DEFAULT_GPU_FRACTION",
    "DEFAULT_HEARTBEAT_S",
    "DEFAULT_LEASE_S",
    "DEFAULT_START_GRACE_S",
    "DEFAULT_TIMEOUT_GRACE_S",
    "DEFAULT_TIMEOUT_S",
    "TRANSIENT_MARK",
    "EvaluationPool",
    "HeartbeatBoard",
    "TransientFailure",
    "is_transient",
    "worker_identity",
]

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_GPU_FRACTION = 0.25
# Ray starts worker processes lazily and a fresh one imports torch before it can run
# anything, so the driver's deadline allows this much beyond the request's own timeout
# (which the worker enforces itself, between steps).
DEFAULT_TIMEOUT_GRACE_S = 15.0
_LOCAL_OBJECT_STORE_BYTES = 256 * 1024**2  # results are small; don't reserve 30% of RAM
DEFAULT_LEASE_S = 30.0
# A fresh worker process imports torch and our packages before its first beat.
DEFAULT_START_GRACE_S = 120.0


class EvaluationPool:
    """Evaluate many requests in parallel on Ray.

    ``workers``: parallel evaluations (default ``os.cpu_count()`` locally, the cluster's
    CPU count when joining one). Each evaluation is one Ray task with ``num_cpus=1`` and,
    when the cluster has GPUs, its share of one GPU (module docstring; ``gpu_bytes``: one
    GPU's memory, probed when None; ``gpu_fraction``: the share of a candidate whose memory
    cannot be estimated, and of every one when the probe fails); each gets
    ``cores // workers`` torch threads. ``timeout_s`` applies to requests whose own
    ``timeout_s`` is None. ``max_retries``: further attempts after a lost worker, an
    expired lease or a transient failure (see the module docstring). ``build_model`` is
    passed to ``evaluate`` on the worker (it must pickle; the default decodes DOGMA
    genomes). ``heartbeat_s`` / ``lease_s`` / ``start_grace_s`` set the leases
    (``lease_s=None`` turns heartbeats off); ``on_lease`` receives every decision about
    an attempt as a ``store.LeaseIn``.
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
        on_lease: Callable[[LeaseIn], None] | None = None,
        gpu_bytes: int | None = None,
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
        self.gpu_bytes = gpu_bytes
        self.gpus = 0.0  # GPUs of the cluster (Ray's "GPU" resource), known once started
        self._shares: GpuShares | None = None
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
        """Start (or join) Ray and size the pool from the resources it reports; build the
        CPU kernels first (`build_cpu_kernels`)."""
        if self._remote is not None:
            return
        build_cpu_kernels()
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
                        # Ray's default lowers workers by 15: beside busy programs they
                        # starve (evaluation.niceness); ours is the driver's own niceness
                        _system_config={"worker_niceness": worker_niceness()},
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
        self.gpus = float(gpus)
        if gpus > 0:
            options["num_gpus"] = self.gpu_fraction
            self.slots = min(self.slots, max(1, int(gpus * PACKING_GRID)))
            gpu_bytes = self.gpu_bytes or _probe_gpu_bytes(ray)
            if gpu_bytes:
                self._shares = GpuShares(gpu_bytes, self.build_model, fallback=self.gpu_fraction)
            else:
                self.slots = min(self.slots, max(1, int(gpus / self.gpu_fraction)))
        cores = (os.cpu_count() or 1) if self._started_ray else cpus
        self.torch_threads = max(1, cores // self.slots)
        self._function, self._options = ray.remote(evaluate_on_worker), options
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

    @property
    def device_type(self) -> str:
        """Where candidates train: ``"cuda"`` when the cluster has GPUs, else ``"cpu"``
        (``evaluation.precision.pool_precision`` resolves ``auto`` by it)."""
        return "cuda" if self.gpus > 0 else "cpu"

    def gpu_share(self, request: EvalRequest) -> float:
        """The fraction of a GPU ``request`` asks Ray for: 0 without GPUs, else its
        estimated share (``evaluation.gpu``), never more than the cluster has."""
        if self.gpus <= 0:
            return 0.0
        share = self._shares(request) if self._shares is not None else self.gpu_fraction
        return min(share, self.gpus)

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
        if self._remote is None:
            raise RuntimeError("EvaluationPool is not started; use it as a context manager")
        return Dispatch(self, requests, on_result).run()

    @property
    def board(self) -> Any:
        """The heartbeat board actor of the started pool; None when leases are off."""
        return self._board

    def launch(
        self, request: EvalRequest, token: str, attempt: int, avoid: frozenset[str] = frozenset()
    ) -> ObjectRef:
        """Submit ``attempt`` (1-based) at ``request`` as a Ray task named ``token`` on the
        heartbeat board. Ray's own restarts of a later attempt count against the same
        budget of ``max_retries + 1`` attempts. ``avoid``: Ray node ids where the request
        failed for its environment; the attempt goes to another live node when there is
        one (soft affinity: if that node cannot take it, Ray places it anywhere)."""
        remote = self._remote
        options: dict[str, Any] = {}
        if attempt > 1:
            options["max_retries"] = max(0, self.max_retries + 1 - attempt)
        if self.gpus > 0:
            options["num_gpus"] = self.gpu_share(request)
        other = _another_node(avoid) if avoid else None
        if other is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=other, soft=True)
        if options:
            remote = self._function.options(**{**self._options, **options})
        request = self.within_share(request)
        return remote.remote(
            request, self.build_model, self.torch_threads, self._board, token, self.heartbeat_s
        )

    def within_share(self, request: EvalRequest) -> EvalRequest:
        """``request`` held to its GPU share: ``max_memory_bytes`` at most ``share x
        gpu_bytes - PROCESS_BYTES``, so that its allocator is capped there (``evaluate``
        sets the CUDA per-process memory fraction) and a candidate that outgrows its
        estimate fails ``oom`` itself instead of starving the candidates beside it. A
        request unchanged without GPUs, without a probed GPU size, or with a lower limit."""
        if self.gpus <= 0 or self._shares is None:
            return request
        cap = int(self.gpu_share(request) * self._shares.gpu_bytes) - PROCESS_BYTES
        if request.max_memory_bytes is not None and request.max_memory_bytes <= cap:
            return request
        return replace(request, max_memory_bytes=max(1, cap))


def _another_node(avoid: frozenset[str]) -> str | None:
    """The first live Ray node (by id) with CPUs that is not in ``avoid``; None if none."""
    import ray

    live = sorted(
        node["NodeID"]
        for node in ray.nodes()
        if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) > 0
    )
    return next((node for node in live if node not in avoid), None)


def build_cpu_kernels() -> None:
    """Build (or load from cache) the C++ CPU kernels once in the driver, so that workers
    only load them: a first-ever build takes ~20 s a kernel and must not eat candidates' time
    limits. The builds are compiler processes, so they run side by side, one a core."""
    import torch

    if torch.cuda.is_available():
        return
    from concurrent.futures import ThreadPoolExecutor

    from dogma_evolve.kernels.gated_linear_recurrence import cpu as scalar_scan
    from dogma_evolve.kernels.recurrent import cpu as recurrent
    from dogma_evolve.kernels.selective_scan import cpu as selective_scan
    from dogma_evolve.kernels.wkv import cpu as wkv

    builds = [selective_scan.available, recurrent.available, wkv.available, scalar_scan.available]
    with ThreadPoolExecutor(max_workers=max(1, min(len(builds), os.cpu_count() or 1))) as pool:
        list(pool.map(lambda build: build(), builds))


def _probe_gpu_bytes(ray: Any, timeout_s: float = 120.0) -> int | None:
    """One GPU's memory, read by a Ray task that holds a whole GPU for the moment it takes;
    None when that fails (no ``nvidia-smi`` and no CUDA where the task ran)."""
    try:
        probe = ray.remote(num_gpus=1, num_cpus=0, max_retries=0)(probe_gpu_bytes)
        return int(ray.get(probe.remote(), timeout=timeout_s))
    except Exception as error:  # noqa: BLE001 - fall back to gpu_fraction per candidate
        logging.getLogger(__name__).warning("GPU memory probe failed, packing by gpu_fraction: %s", error)
        return None


def _import_ray() -> Any:
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
def _loopback_only() -> Iterator[None]:
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
