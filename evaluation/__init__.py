"""Train and score candidates on locally generated tasks; failures are results, not errors.

- ``get_task(name, **overrides)`` / ``TASKS``: seeded synthetic tasks (``mqar`` ...).
- ``train(model, task, steps, seed, ...)``: AdamW training; ``score(model, task, ...)``:
  held-out metrics; ``train_and_score(...)``: the two, as one flat metrics dict.
- ``evaluate(request, build_model=None)``: one ``EvalRequest`` -> one ``EvalResult``,
  with status ``ok | invalid | nan | oom | timeout | crash``; never raises.
- ``EvaluationPool(workers, ray_address, timeout_s, max_retries)``: the same on Ray,
  one task per candidate, results in request order.
"""

from .errors import EvaluationTimeout, IncompatibleModel, MemoryBudgetExceeded, NonFiniteLoss
from .evaluate import (
    DEFAULT_STEPS,
    account_genome,
    build_from_genome,
    classify_failure,
    estimate_training_bytes,
    evaluate,
    safetensors_bytes,
    train_model,
)
from .pool import EvaluationPool, TransientFailure
from .result import STATUSES, EvalRequest, EvalResult
from .tasks import IGNORE_INDEX, TASKS, Task, get_task
from .trainer import ScoreStats, TrainStats, score, train, train_and_score

__all__ = [
    "DEFAULT_STEPS",
    "IGNORE_INDEX",
    "STATUSES",
    "TASKS",
    "EvalRequest",
    "EvalResult",
    "EvaluationPool",
    "EvaluationTimeout",
    "IncompatibleModel",
    "MemoryBudgetExceeded",
    "NonFiniteLoss",
    "ScoreStats",
    "Task",
    "TrainStats",
    "TransientFailure",
    "account_genome",
    "build_from_genome",
    "classify_failure",
    "estimate_training_bytes",
    "evaluate",
    "get_task",
    "safetensors_bytes",
    "score",
    "train",
    "train_and_score",
    "train_model",
]
