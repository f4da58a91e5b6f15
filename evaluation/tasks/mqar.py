"""Multi-query associative recall (MQAR), as in Zoology (Arora et al., 2023).

A sequence first lists ``num_pairs`` key-value pairs, then asks ``num_queries`` of those
keys again, each query key followed by its value::

    k3 v3 k1 v1 k7 v7 k0 v0 | _ _ k1 v1 _ _ k7 v7 k3 v3 ...
    ^ context (2 * num_pairs) ^ queries at random slots, blanks (token 0) in between

The model reads ``inputs = seq[:-1]`` and is scored on ``targets = seq[1:]`` only where
the input is a query key, i.e. it must recall the value bound to that key earlier in the
context. Keys are distinct within a sequence, and so are values (Zoology's choice), and
bindings are redrawn per sequence: nothing can be memorised in the weights, so a model
without sequence mixing is stuck at chance.

Token ids: 0 = blank, ``1 .. num_keys`` = keys, then ``num_values`` value ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import IGNORE_INDEX, Task

BLANK = 0


@dataclass(frozen=True)
class MQAR(Task):
    """Multi-query associative recall.

    Defaults are sized so that a 2-layer, width-64 attention model learns the task
    well above chance in a few seconds of one CPU thread, while an MLP-only model cannot.
    """

    name = "mqar"

    # Calibrated on one CPU thread: TinyAttentionLM reaches 0.6-1.0 accuracy (chance 0.05)
    # in 300 steps of batch 32 (~3 s); MLPOnlyLM stays at 0.04-0.07.
    num_pairs: int = 4
    num_queries: int = 0  # 0: query every key once (Zoology's setting)
    num_keys: int = 8
    num_values: int = 20  # chance accuracy 1/20
    seq_len: int = 0  # 0: the shortest that fits, 2 * (num_pairs + num_queries) - 1

    def __post_init__(self) -> None:
        queries = self.num_queries or self.num_pairs
        object.__setattr__(self, "num_queries", queries)
        shortest = 2 * (self.num_pairs + queries) - 1
        object.__setattr__(self, "seq_len", self.seq_len or shortest)
        if self.num_pairs < 1:
            raise ValueError(f"mqar: num_pairs must be >= 1, got {self.num_pairs}")
        if not 1 <= queries <= self.num_pairs:
            raise ValueError(f"mqar: num_queries must lie in 1..num_pairs, got {queries}")
        if self.num_pairs > self.num_keys or self.num_pairs > self.num_values:
            raise ValueError(
                f"mqar: num_pairs={self.num_pairs} needs at least as many keys "
                f"({self.num_keys}) and values ({self.num_values})"
            )
        if self.seq_len < shortest:
            raise ValueError(f"mqar: seq_len={self.seq_len} < {shortest} needed for the pairs")

    @property
    def vocab_size(self) -> int:  # type: ignore[override]
        return 1 + self.num_keys + self.num_values

    @property
    def chance_accuracy(self) -> float:  # type: ignore[override]
        return 1.0 / self.num_values

    def batch(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        B, N, Q = batch_size, self.num_pairs, self.num_queries
        total = self.seq_len + 1  # inputs and targets are the two shifted views
        num_slots = (total - 2 * N) // 2

        # Sampling without replacement, row-wise: the first N of a random permutation.
        keys = _first_of_permutation(generator, B, self.num_keys, N) + 1
        values = _first_of_permutation(generator, B, self.num_values, N) + 1 + self.num_keys

        seq = torch.full((B, total), BLANK, dtype=torch.int64)
        seq[:, 0 : 2 * N : 2] = keys
        seq[:, 1 : 2 * N : 2] = values

        asked = _first_of_permutation(generator, B, N, Q)  # which pairs are queried
        slots = _first_of_permutation(generator, B, num_slots, Q)  # where, in the query part
        key_pos = 2 * N + 2 * slots  # (B, Q)
        seq.scatter_(1, key_pos, keys.gather(1, asked))
        seq.scatter_(1, key_pos + 1, values.gather(1, asked))

        inputs = seq[:, :-1].contiguous()
        targets = torch.full_like(inputs, IGNORE_INDEX)
        targets.scatter_(1, key_pos, seq.gather(1, key_pos + 1))
        return inputs, targets


def _first_of_permutation(generator: torch.Generator, rows: int, n: int, k: int) -> torch.Tensor:
    """(rows, k) int64: per row, k distinct integers from range(n) in random order."""
    return torch.rand(rows, n, generator=generator).argsort(dim=1)[:, :k]
