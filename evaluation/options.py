"""The values of the training options a run names, as plain data: no torch here, so that
`evolution.config.RunConfig` and the `evolve` parser (built by every command, `evolve genome
validate` included) read them without loading it. `evaluation.precision` holds the rules
(and re-exports these names); `evaluation.budget`, itself torch-free, holds ``BUDGETS``.

:class:`Recipe` is the trainer's hyperparameters with their defaults, spelled here once:
`evaluation.trainer.train` and ``train_and_score`` take them as keywords (``lr=...``) and
fill the rest from ``RECIPE``."""

from __future__ import annotations

from dataclasses import dataclass

PRECISIONS = ("auto", "fp32", "bf16")
#: What a stored result without ``metrics["precision"]`` trained in.
LEGACY_PRECISION = "fp32"
#: The most training seeds a command trains one point under (`evolve ablate`, `evolve scale`).
MAX_SEEDS = 100


@dataclass(frozen=True)
class Recipe:
    """How `evaluation.trainer.train` trains (its module docstring): AdamW with peak rate
    ``lr`` (`evaluation.evaluate` gives a DOGMA phenotype the width rule's rate instead,
    `evaluation.budget.learning_rate`), ``betas`` and ``weight_decay`` on matrices only,
    linear warmup over ``warmup_fraction`` of the steps then cosine decay, global grad-norm
    clipping at ``grad_clip``, batches of ``batch_size`` sequences (a task's
    ``train_batch_size`` where `evaluation.evaluate` trains)."""

    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.98)
    warmup_fraction: float = 0.1
    grad_clip: float = 1.0


RECIPE = Recipe()  # the defaults

__all__ = ["LEGACY_PRECISION", "MAX_SEEDS", "PRECISIONS", "RECIPE", "Recipe"]
