"""Memorisation (MAD): a fixed key -> value table that must be stored in the weights.

Every sequence lists random keys, each followed by its value from one table that is the
same for all sequences (it depends only on ``table_seed``). Nothing in the context
helps, so this measures the storage capacity of channel mixers (the Archival bases),
the complement of the recall tasks.

Token ids: 0 unused, keys ``1 .. num_keys``, then ``num_values`` values.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from .base import IGNORE_INDEX, Task, derive_seed


@dataclass(frozen=True)
class Memorization(Task):
    name = "memorization"

    num_keys: int = 256
    num_values: int = 16
    num_pairs: int = 8
    table_seed: int = 0

    def __post_init__(self) -> None:
        if min(self.num_keys, self.num_values, self.num_pairs) < 1:
            raise ValueError("memorization: sizes must be >= 1")

    @property
    def vocab_size(self) -> int:  # type: ignore[override]
        return 1 + self.num_keys + self.num_values

    @property
    def seq_len(self) -> int:  # type: ignore[override]
        return 2 * self.num_pairs - 1

    @property
    def chance_accuracy(self) -> float:  # type: ignore[override]
        return 1.0 / self.num_values

    @cached_property
    def table(self) -> torch.Tensor:
        """(num_keys,) int64: the value token of each key (index 0 is key token 1)."""
        generator = torch.Generator().manual_seed(derive_seed(self.name, "table", self.table_seed))
        values = torch.randint(self.num_values, (self.num_keys,), generator=generator)
        return values + 1 + self.num_keys

    def batch(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        keys = torch.randint(self.num_keys, (batch_size, self.num_pairs), generator=generator)
        seq = torch.stack([keys + 1, self.table[keys]], dim=2).flatten(1)
        inputs = seq[:, :-1].contiguous()
        targets = torch.full_like(inputs, IGNORE_INDEX)
        targets[:, 0::2] = seq[:, 1::2]
        return inputs, targets
