"""The task contract every evaluation task honours.

A task is a seeded generator of next-token-prediction batches. Loss and accuracy are
measured only where the target is not ``IGNORE_INDEX`` (the answer positions), so a task
decides what is being tested simply by which targets it leaves in.
"""

from __future__ import annotations

import dataclasses
import hashlib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # imported where a generator is made: the contract and the seeds need no torch
    import torch

IGNORE_INDEX = -100


def derive_seed(*parts: object) -> int:
    """A 63-bit seed derived from ``parts``: independent streams without sharing a global RNG."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class Task(ABC):
    """A synthetic sequence task with a fixed vocabulary and sequence length.

    Concrete tasks are frozen dataclasses whose fields are their settings, so a task is
    fully described by ``name`` plus ``settings()`` and rebuilt with ``get_task``.
    Every task provides:

    - ``name``: registry name (a class attribute, never an override);
    - ``vocab_size``: token ids the model must embed and predict;
    - ``seq_len``: length T of ``inputs`` and ``targets``;
    - ``chance_accuracy``: answer-position accuracy of a model that ignores the context;
    - ``train_batch_size``: the batch size it was calibrated at (part of what a fidelity
      means for it, so evaluations of one task and fidelity train on the same tokens);
    - ``batch(generator, batch_size)``.
    """

    name: str = "task"
    train_batch_size: ClassVar[int] = 32  # sequences per training step when a request names none
    vocab_size: int
    seq_len: int
    chance_accuracy: float

    @abstractmethod
    def batch(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw ``(inputs (B, T) int64, targets (B, T) int64)``; ignored targets are -100.

        All randomness comes from ``generator`` (a CPU generator), so equal generator
        states give equal batches.
        """

    def settings(self) -> dict[str, object]:
        """The task's settings: ``get_task(self.name, **self.settings()) == self``."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def train_generator(self, seed: int) -> torch.Generator:
        """Generator for the training stream of run ``seed``."""
        import torch

        return torch.Generator().manual_seed(derive_seed(self.name, "train", seed))

    def eval_generator(self, seed: int = 0) -> torch.Generator:
        """Generator for held-out batches, a stream separate from every training stream.

        Held-out data depends only on the task and ``seed`` (0 by default), so candidates
        trained with different seeds are scored on identical batches.
        """
        import torch

        return torch.Generator().manual_seed(derive_seed(self.name, "eval", seed))

    def eval_batches(
        self, num_batches: int, batch_size: int, seed: int = 0
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        generator = self.eval_generator(seed)
        return [self.batch(generator, batch_size) for _ in range(num_batches)]
