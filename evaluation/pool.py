"""Run evaluations on Ray: one task per candidate, a timeout per candidate, retries for
lost workers, exactly one result per request.

Ray starts once per pool (``with EvaluationPool() as pool``). Locally it is started on
the loopback interface only, without dashboard or usage reporting; with ``ray_address``
the pool joins an existing cluster and leaves it running on exit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
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


def _evaluate_on_worker(
    request: EvalRequest, build_model: ModelBuilder | None, torch_threads: int
) -> EvalResult:
    """The body of one Ray task (module level, so it pickles by reference)."""
    import torch

    torch.set_num_threads(torch_threads)
    return evaluate(request, build_model)


class EvaluationPool:
    """Evaluate many requests in parallel on Ray.

    ``workers``: parallel evaluations (default ``os.cpu_count()`` locally, the cluster's
    CPU count when joining one). Each evaluation is one Ray task with ``num_cpus=1``, or
    ``gpu_fraction`` of a GPU when the cluster has GPUs; on CPU each gets
    ``cores // workers`` torch threads. ``timeout_s`` applies to requests whose own
    ``timeout_s`` is None. ``max_retries`` is Ray's retry count for a task whose worker
    died. ``build_model`` is passed to ``evaluate`` on the worker (it must pickle; the
    default decodes DOGMA genomes).
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
    ) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not 0 < gpu_fraction <= 1:
            raise ValueError(f"gpu_fraction must lie in (0, 1], got {gpu_fraction}")
        self.workers = workers
        self.ray_address = ray_address
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.build_model = build_model
        self.gpu_fraction = gpu_fraction
        self.timeout_grace_s = timeout_grace_s
        self._started_ray = False
        self._remote: Any = None
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
                        num_cpus=self.workers or os.cpu_count() or 1,
                        include_dashboard=False,
                        _node_ip_address="127.0.0.1",
                        dashboard_host="127.0.0.1",
                        object_store_memory=_LOCAL_OBJECT_STORE_BYTES,
                        log_to_driver=False,
                        logging_level=logging.ERROR,
                    )
            else:
                ray.init(
                    address=self.ray_address, log_to_driver=False, logging_level=logging.ERROR
                )
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
        self._remote = ray.remote(_evaluate_on_worker).options(**options)

    def close(self) -> None:
        """Shut Ray down if this pool started it; a joined cluster keeps running."""
        if self._remote is None:
            return
        self._remote = None
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
        ``timeout``. A worker lost more often than ``max_retries`` yields ``crash``.
        """
        import ray

        if self._remote is None:
            raise RuntimeError("EvaluationPool is not started; use it as a context manager")
        results: list[EvalResult | None] = [None] * len(requests)
        waiting = deque(enumerate(requests))
        running: dict[Any, tuple[int, float, float]] = {}  # ref -> (index, limit, deadline)

        def record(index: int, result: EvalResult) -> None:
            results[index] = result
            if on_result is not None:
                on_result(result)

        try:
            while waiting or running:
                while waiting and len(running) < self.slots:
                    index, request = waiting.popleft()
                    if request.timeout_s is None:
                        request = replace(request, timeout_s=self.timeout_s)
                    limit = float(request.timeout_s)
                    ref = self._remote.remote(request, self.build_model, self.torch_threads)
                    deadline = time.monotonic() + limit + self.timeout_grace_s
                    running[ref] = (index, limit, deadline)

                next_deadline = min(deadline for _, _, deadline in running.values())
                wait_s = max(0.0, next_deadline - time.monotonic())
                ready, _ = ray.wait(list(running), num_returns=1, timeout=wait_s)
                if ready:  # collect everything finished by now, not just the first
                    ready, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
                for ref in ready:
                    index, _, _ = running.pop(ref)
                    record(index, self._fetch(ref, requests[index]))

                now = time.monotonic()
                for ref, (index, limit, deadline) in list(running.items()):
                    if now < deadline:
                        continue
                    del running[ref]
                    ray.cancel(ref, force=True)
                    reason = (
                        f"no result within {limit:g}s (+{self.timeout_grace_s:g}s grace); "
                        "worker killed"
                    )
                    record(
                        index,
                        EvalResult.for_request(
                            requests[index], "timeout", reason,
                            wall_seconds=limit + self.timeout_grace_s,
                        ),
                    )
        finally:
            for ref in running:  # on_result raised or KeyboardInterrupt: leave nothing behind
                ray.cancel(ref, force=True)
        return [result for result in results if result is not None]

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
            return EvalResult.for_request(
                request, "crash", f"worker returned {type(result).__name__}"
            )
        return result


def _import_ray():
    """Import Ray with usage reporting off (it would otherwise try to phone home)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    return ray


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
