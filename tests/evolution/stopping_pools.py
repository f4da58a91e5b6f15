"""The pools `evolve ablate` and `evolve calibrate` tests train on: real in-process
trainings (`InProcessPool`) that can stop like a killed command or meet an environment
failure, and a stand-in for a command's `_pool` that keeps every pool it opened."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from dogma_evolve.evaluation import EvalRequest, EvalResult
from dogma_evolve.evaluation.environment import environment_reason
from dogma_evolve.evaluation.protocol import OnResult
from dogma_evolve.evaluation.table import InProcessPool


class StoppingPool(InProcessPool):
    """Real in-process trainings; stops like a killed command after ``stop_after`` results;
    the ``broken_at``-th result is an environment failure (as the Ray pool hands one on once
    its retries are spent)."""

    def __init__(self, stop_after: int | None, broken_at: int | None = None) -> None:
        super().__init__()
        self.stop_after, self.broken_at = stop_after, broken_at

    def evaluate(
        self, requests: Sequence[EvalRequest], on_result: OnResult | None = None
    ) -> list[EvalResult]:
        def counted(result: EvalResult) -> None:
            if self.requests == self.broken_at:
                cause = "ImportError: No module named 'scipy' on vm; gave up after 3 attempts"
                result = replace(result, status="crash", reason=environment_reason(cause))
            if on_result is not None:
                on_result(result)
            if self.stop_after is not None and self.requests >= self.stop_after:
                raise KeyboardInterrupt

        return super().evaluate(requests, counted)


class Pools:
    """Stands for a command's `_pool(args, store, run_id)`: every pool it opens, in `made`;
    the next pools stop after ``stop_after`` results and break at the ``broken_at``-th."""

    def __init__(self) -> None:
        self.made: list[StoppingPool] = []
        self.stop_after: int | None = None
        self.broken_at: int | None = None

    def __call__(self, args: Any, store: Any, run_id: str) -> StoppingPool:
        self.made.append(StoppingPool(self.stop_after, self.broken_at))
        return self.made[-1]
