"""What runs on a Ray worker: the task body, its heartbeat thread, the heartbeat board.

The driver side (when to submit, retry, expire or give up) is :mod:`evaluation.dispatch`;
this module is only what the worker does and what it tells the driver.

* :func:`evaluate_on_worker` is the body of one Ray task: it evaluates one request and
  adds ``torch_threads`` and ``worker_host`` / ``worker_pid`` / ``worker_node`` (and, on a
  GPU, ``gpu_share``: the fraction of one GPU Ray gave it) to the result's metrics. A
  candidate that runs out of GPU memory is an ``oom`` result like any failure; ``evaluate``
  has freed its model and emptied the CUDA cache before this returns, so the worker
  process goes on to the next candidate. With a board and a token it first waits for one heartbeat to land,
  then beats every ``heartbeat_s`` seconds from a daemon thread until the evaluation ends;
  each beat carries the seconds its time limit has left (`trainer.Deadline`: the limit grows
  with the candidate's measured pace), so the driver waits exactly as long as the worker.
* :class:`HeartbeatBoard` (`evaluation.protocol`) is the small Ray actor the beats go to.
* :class:`TransientFailure` raised while building or training marks the failure as worth
  another attempt; :func:`is_transient` is how the driver reads that off a result.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from dataclasses import replace
from typing import Any

from .evaluate import ModelBuilder, evaluate
from .result import EvalRequest, EvalResult
from .trainer import Deadline

DEFAULT_HEARTBEAT_S = 2.0
TRANSIENT_MARK = "(transient)"
FIRST_BEAT_TIMEOUT_S = 30.0


class TransientFailure(RuntimeError):
    """Raise this (or a subclass) while building or training to have the pool retry the
    evaluation: the failure is worth another attempt (a flaky file system, a device
    that went away). Any other exception is final: recorded with its reason, not retried.
    """

    def __str__(self) -> str:
        return f"{super().__str__()} {TRANSIENT_MARK}"


def is_transient(result: EvalResult) -> bool:
    """Whether ``result`` is a crash caused by a :class:`TransientFailure` (its reason
    carries :data:`TRANSIENT_MARK`)."""
    return result.status == "crash" and TRANSIENT_MARK in result.reason


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


def identity_text(identity: dict[str, Any]) -> str:
    """``host:pid@node12`` (the first 12 characters of the Ray node id, ``-`` without)."""
    node = identity.get("worker_node") or "-"
    return f"{identity['worker_host']}:{identity['worker_pid']}@{node[:12]}"


def evaluate_on_worker(
    request: EvalRequest,
    build_model: ModelBuilder | None,
    torch_threads: int,
    board: Any = None,
    token: str | None = None,
    heartbeat_s: float = DEFAULT_HEARTBEAT_S,
) -> EvalResult:
    """The body of one Ray task (module level, so it pickles by reference).

    ``board`` is a handle to a :class:`HeartbeatBoard` actor (None: no heartbeats);
    ``token`` names this attempt on it.
    """
    import torch

    torch.set_num_threads(torch_threads)
    identity = worker_identity()
    stop = threading.Event()
    deadline = Deadline(request.timeout_s)
    if board is not None and token is not None:
        _start_heartbeat(board, token, identity_text(identity), heartbeat_s, stop, deadline)
    try:
        result = evaluate(request, build_model, deadline=deadline)
    finally:
        stop.set()
    metrics = {**result.metrics, "torch_threads": torch_threads, **identity}
    share = _assigned_gpu_share()
    if share:
        metrics["gpu_share"] = share
    return replace(result, metrics=metrics)


def _assigned_gpu_share() -> float:
    """The fraction of a GPU Ray gave this task (0 outside Ray or without GPUs)."""
    try:
        import ray

        if ray.is_initialized():
            return float(ray.get_runtime_context().get_assigned_resources().get("GPU", 0.0))
    except Exception:  # noqa: BLE001 - informative only
        pass
    return 0.0


def _start_heartbeat(
    board: Any, token: str, worker: str, heartbeat_s: float, stop: threading.Event, deadline: Deadline
) -> None:
    """Send one beat and wait for it to land (from then on, silence means a hung worker),
    then beat every ``heartbeat_s`` seconds from a daemon thread until ``stop`` is set; each
    beat says how long ``deadline`` has left."""
    import ray

    with contextlib.suppress(Exception):
        ray.get(board.beat.remote(token, worker, deadline.remaining()), timeout=FIRST_BEAT_TIMEOUT_S)

    def heartbeat() -> None:
        while True:
            with contextlib.suppress(Exception):  # the driver decides what silence means
                board.beat.remote(token, worker, deadline.remaining())
            if stop.wait(heartbeat_s):
                return

    threading.Thread(target=heartbeat, name="evolve-heartbeat", daemon=True).start()
