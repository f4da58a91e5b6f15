"""Train and score candidates on locally generated tasks; failures are results, not errors.

- ``get_task(name, **overrides)`` / ``TASKS``: seeded synthetic tasks (``mqar`` ...).
- ``train(model, task, steps, seed, ...)``: AdamW training; ``score(model, task, ...)``:
  held-out metrics; ``train_and_score(...)``: the two, as one flat metrics dict.
- ``evaluate(request, build_model=None)``: one ``EvalRequest`` -> one ``EvalResult``,
  with status ``ok | invalid | nan | oom | timeout | crash``; never raises.
- ``EvaluationPool(workers, ray_address, timeout_s, max_retries)``: the same on Ray,
  one task per candidate, results in request order.
- ``EnvironmentFailure``: what a search raises (and stops on, nothing committed) when an
  evaluation failed for its machine, not its genome, on every attempt (`evaluation.environment`).

Names are imported on first use (PEP 562), as in ``evolution``: importing a torch-free
module of this package (``evaluation.budget``, ``evaluation.options``, ``evaluation.result``
...) loads no torch, so ``evolve genome validate`` and the command-line parser answer
without it.
"""

from typing import TYPE_CHECKING

from dogma_evolve.evaluation.lazy import install

if TYPE_CHECKING:  # the names as type checkers see them; at run time, __getattr__
    from .environment import EnvironmentFailure
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

_PUBLIC = {
    "DEFAULT_STEPS": "dogma_evolve.evaluation.evaluate",
    "IGNORE_INDEX": "dogma_evolve.evaluation.tasks",
    "STATUSES": "dogma_evolve.evaluation.result",
    "TASKS": "dogma_evolve.evaluation.tasks",
    "EvalRequest": "dogma_evolve.evaluation.result",
    "EnvironmentFailure": "dogma_evolve.evaluation.environment",
    "EvalResult": "dogma_evolve.evaluation.result",
    "EvaluationPool": "dogma_evolve.evaluation.pool",
    "EvaluationTimeout": "dogma_evolve.evaluation.errors",
    "IncompatibleModel": "dogma_evolve.evaluation.errors",
    "MemoryBudgetExceeded": "dogma_evolve.evaluation.errors",
    "NonFiniteLoss": "dogma_evolve.evaluation.errors",
    "ScoreStats": "dogma_evolve.evaluation.trainer",
    "Task": "dogma_evolve.evaluation.tasks",
    "TrainStats": "dogma_evolve.evaluation.trainer",
    "TransientFailure": "dogma_evolve.evaluation.pool",
    "account_genome": "dogma_evolve.evaluation.evaluate",
    "build_from_genome": "dogma_evolve.evaluation.evaluate",
    "classify_failure": "dogma_evolve.evaluation.evaluate",
    "estimate_training_bytes": "dogma_evolve.evaluation.evaluate",
    "evaluate": "dogma_evolve.evaluation.evaluate",
    "get_task": "dogma_evolve.evaluation.tasks",
    "safetensors_bytes": "dogma_evolve.evaluation.evaluate",
    "score": "dogma_evolve.evaluation.trainer",
    "train": "dogma_evolve.evaluation.trainer",
    "train_and_score": "dogma_evolve.evaluation.trainer",
    "train_model": "dogma_evolve.evaluation.evaluate",
}

__all__ = [  # = the keys of _PUBLIC, spelt out for the linters
    "DEFAULT_STEPS",
    "IGNORE_INDEX",
    "STATUSES",
    "TASKS",
    "EnvironmentFailure",
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

__getattr__ = install(__name__, _PUBLIC)
