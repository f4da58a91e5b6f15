"""Pools that evaluate in this process, without Ray: table look-ups and small runs.

- ``TableEvaluator(lookup)``: for a space whose evaluation is a look-up in a table of
  measured results (NAS-Bench-201: `evolution.spaces.nb201.lookup`). ``lookup(request)``
  returns the metrics; a ``ValueError`` or ``KeyError`` it raises becomes an
  ``invalid`` result.
- ``InProcessPool()``: trains DOGMA candidates one by one with ``evaluation.evaluate``
  (small benchmarks and tests).

Both follow the `evaluation.protocol.Pool` protocol and are context managers that hold
nothing, so they stand wherever an ``EvaluationPool`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Self

from dogma_evolve.evaluation.evaluate import evaluate
from dogma_evolve.evaluation.protocol import OnResult
from dogma_evolve.evaluation.result import EvalRequest, EvalResult

Lookup = Callable[[EvalRequest], dict[str, Any]]


class _InProcess:
    """Evaluates requests one by one in this process; counts them in `requests`."""

    def __init__(self) -> None:
        self.requests = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _one(self, request: EvalRequest) -> EvalResult:
        raise NotImplementedError

    def evaluate(
        self, requests: Sequence[EvalRequest], on_result: OnResult | None = None
    ) -> list[EvalResult]:
        out = []
        for request in requests:
            self.requests += 1
            result = self._one(request)
            out.append(result)
            if on_result:
                on_result(result)
        return out


class TableEvaluator(_InProcess):
    """A table space's pool: each request's metrics come from `lookup(request)`."""

    # Nothing trains on a device here: ``auto`` resolves to fp32 (`evaluation.precision`),
    # the precision every stored table result records, so the cross-run cache reuses them
    # whatever arithmetic this machine's CPU probe would choose for training.
    device_type = "table"

    def __init__(self, lookup: Lookup) -> None:
        super().__init__()
        self.lookup = lookup

    def _one(self, request: EvalRequest) -> EvalResult:
        try:
            return EvalResult.for_request(request, "ok", metrics=self.lookup(request))
        except (ValueError, KeyError) as e:
            return EvalResult.for_request(request, "invalid", str(e))


class InProcessPool(_InProcess):
    """Trains each request in this process with `dogma_evolve.evaluation.evaluate` (never raises)."""

    def _one(self, request: EvalRequest) -> EvalResult:
        return evaluate(request)


__all__ = ["InProcessPool", "Lookup", "TableEvaluator"]
