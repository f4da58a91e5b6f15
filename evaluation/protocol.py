"""What the parts of evaluation ask of each other: the `Pool` protocol (search → pool) and
the heartbeat board (Ray worker → driver).

A pool takes a batch of ``EvalRequest`` and returns one ``EvalResult`` per request, in
request order, calling ``on_result`` in the caller's process as each one finishes (in
completion order). Failures are results, never exceptions. Implementations:
``EvaluationPool`` (Ray, `evaluation.pool`), ``InProcessPool`` and ``TableEvaluator``
(in this process, `evaluation.table`).

Starting and stopping a pool (Ray's cluster, say) is its owner's business, through the
pool's own context manager; the search only calls ``evaluate``.

`HeartbeatBoard` is the small Ray actor an `EvaluationPool`'s workers beat to, keeping the last
beat of every attempt in flight on its own clock, so no clock skew between machines reaches the
driver's judgement. It lives here, where nothing imports torch: the actor's Ray worker process
imports only this module (beside the trainer in `evaluation.worker` it cost every pool start a
torch import, about 1.7 CPU seconds).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from dogma_evolve.evaluation.result import EvalRequest, EvalResult

OnResult = Callable[[EvalResult], None]


class Pool(Protocol):
    """Evaluates requests; see the module docstring."""

    def evaluate(
        self, requests: Sequence[EvalRequest], on_result: OnResult | None = None
    ) -> list[EvalResult]: ...


class HeartbeatBoard:
    """Ray actor: the last heartbeat of every attempt in flight, on the actor's clock.

    An attempt is named by a token (a random hex string the driver makes per attempt);
    a worker names itself by the text of `evaluation.worker.identity_text`.
    """

    def __init__(self) -> None:
        self._beats: dict[str, tuple[float, str, float | None]] = {}

    def beat(self, token: str, worker: str, remaining_s: float | None = None) -> None:
        self._beats[token] = (time.monotonic(), worker, remaining_s)

    def ages(self, tokens: list[str]) -> dict[str, tuple[float, str, float | None]]:
        """token -> (seconds since its last beat, worker, seconds its time limit had left at
        that beat, None when unknown) for tokens that have beaten."""
        now = time.monotonic()
        out = {}
        for t in tokens:
            if t in self._beats:
                at, worker, remaining = self._beats[t]
                out[t] = (now - at, worker, remaining)
        return out

    def forget(self, tokens: list[str]) -> None:
        for token in tokens:
            self._beats.pop(token, None)


__all__ = ["HeartbeatBoard", "OnResult", "Pool"]
