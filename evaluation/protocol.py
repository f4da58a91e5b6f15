"""What a search needs of whatever evaluates its candidates: the `Pool` protocol.

A pool takes a batch of ``EvalRequest`` and returns one ``EvalResult`` per request, in
request order, calling ``on_result`` in the caller's process as each one finishes (in
completion order). Failures are results, never exceptions. Implementations:
``EvaluationPool`` (Ray, `evaluation.pool`), ``InProcessPool`` and ``TableEvaluator``
(in this process, `evaluation.table`).

Starting and stopping a pool (Ray's cluster, say) is its owner's business, through the
pool's own context manager; the search only calls ``evaluate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from dogma_evolve.evaluation.result import EvalRequest, EvalResult

OnResult = Callable[[EvalResult], None]


class Pool(Protocol):
    """Evaluates requests; see the module docstring."""

    def evaluate(
        self, requests: Sequence[EvalRequest], on_result: OnResult | None = None
    ) -> list[EvalResult]: ...


__all__ = ["OnResult", "Pool"]
