"""Exceptions the trainer raises; ``evaluate`` turns each into a typed failure result."""

from __future__ import annotations


class EvaluationTimeout(TimeoutError):
    """Training or scoring ran past its wall-clock limit (status ``timeout``).

    ``progress`` says how far it got, e.g. "after 2/50 steps".
    """

    def __init__(self, limit_s: float, progress: str) -> None:
        super().__init__(f"time limit {limit_s:.3g}s reached {progress}")
        self.limit_s = limit_s
        self.progress = progress


class NonFiniteLoss(FloatingPointError):
    """The loss or the gradient norm became NaN or infinite (status ``nan``)."""


class IncompatibleModel(ValueError):
    """The model does not fit the task: wrong logits shape or too small a vocabulary
    (status ``invalid``)."""


class MemoryBudgetExceeded(MemoryError):
    """The estimated training memory exceeds the request's ``max_memory_bytes``
    (status ``oom``)."""
