"""Selective copying (Gu & Dao, 2023; MAD): copy the scattered data tokens, in order.

A region of blanks holds ``num_tokens`` data tokens at random positions; then come
``num_tokens`` copy markers, and at the i-th marker the model must output the i-th data
token. It needs content-dependent selection: fixed-position (time-invariant) mixing
cannot know where the data tokens were.

    _ d3 _ _ d1 _ d3 _ _ _ d7 _ | c c c c   ->   targets at the markers: d3 d1 d3 d7

Token ids: 0 = blank, 1 = copy marker, then ``num_values`` data tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import IGNORE_INDEX, Task

BLANK, MARKER = 0, 1


@dataclass(frozen=True)
class SelectiveCopying(Task):
    name = "selective_copying"

    num_tokens: int = 4
    num_values: int = 16
    context_len: int = 16

    def __post_init__(self) -> None:
        if not 1 <= self.num_tokens <= self.context_len:
            raise ValueError(f"selective_copying: num_tokens must lie in 1..context_len={self.context_len}")
        if self.num_values < 1:
            raise ValueError("selective_copying: num_values must be >= 1")

    @property
    def vocab_size(self) -> int:  # type: ignore[override]
        return 2 + self.num_values

    @property
    def seq_len(self) -> int:  # type: ignore[override]
        return self.context_len + self.num_tokens

    @property
    def chance_accuracy(self) -> float:  # type: ignore[override]
        return 1.0 / self.num_values

    def batch(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        B, N, L = batch_size, self.num_tokens, self.context_len
        data = torch.randint(self.num_values, (B, N), generator=generator) + 2
        places = torch.rand(B, L, generator=generator).argsort(dim=1)[:, :N].sort(dim=1).values
        inputs = torch.full((B, L + N), BLANK, dtype=torch.int64)
        inputs.scatter_(1, places, data)
        inputs[:, L:] = MARKER
        targets = torch.full_like(inputs, IGNORE_INDEX)
        targets[:, L:] = data
        return inputs, targets
