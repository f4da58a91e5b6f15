"""Compression, as a causal language-modelling task (after MAD's compression task).

MAD asks a model to squeeze a random sequence into one embedding and reconstruct it. A
causal next-token model cannot be forbidden from looking back, so here the sequence must be
kept *retrievable by position*: ``length`` random value tokens, a compress marker, then
``num_queries`` position tokens in random order; at the query for position i the model must
output the i-th value. A fixed-state (recurrent) mixer must hold the whole sequence in its
state — a compression of ``length · log2(num_values)`` bits — while attention can look it
up; the task measures exactly that capacity.

    v5 v2 v9 v2 v7 v1 | C | p3 p0 p5   ->   targets at the queries: v2 v5 v1

Token ids: 0 = compress marker, 1..length = position tokens, then ``num_values`` values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import IGNORE_INDEX, Task

COMPRESS = 0


@dataclass(frozen=True)
class Compression(Task):
    name = "compression"

    length: int = 8
    num_values: int = 16
    num_queries: int = 4

    def __post_init__(self) -> None:
        if self.length < 1 or self.num_values < 2:
            raise ValueError("compression: length must be >= 1 and num_values >= 2")
        if not 1 <= self.num_queries <= self.length:
            raise ValueError(f"compression: num_queries must lie in 1..length={self.length}")

    @property
    def vocab_size(self) -> int:  # type: ignore[override]
        return 1 + self.length + self.num_values

    @property
    def seq_len(self) -> int:  # type: ignore[override]
        return self.length + 1 + self.num_queries

    @property
    def chance_accuracy(self) -> float:  # type: ignore[override]
        return 1.0 / self.num_values

    def batch(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        B, n, q = batch_size, self.length, self.num_queries
        values = torch.randint(self.num_values, (B, n), generator=generator) + 1 + n
        positions = torch.rand(B, n, generator=generator).argsort(dim=1)[:, :q]  # (B, q)
        inputs = torch.cat([values, torch.full((B, 1), COMPRESS), positions + 1], dim=1)
        targets = torch.full_like(inputs, IGNORE_INDEX)
        # The answer to the query at input position t is predicted at position t.
        targets[:, n + 1 :] = values.gather(1, positions)
        return inputs, targets
