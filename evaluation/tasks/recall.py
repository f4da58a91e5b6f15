"""In-context recall and its noisy and fuzzy variants (the MAD suite, Poli et al., 2024).

Each sequence draws its own key -> value mapping, then lists key-value pairs whose keys
repeat; every time a key comes back, the model must produce its value::

    k2 v5  k7 v1  n n  k2 v5  k4 v3  n  k7 v1 ...      (n: noise, noisy_recall only)
                       ^^ scored: k2 was seen before

- ``in_context_recall``: one-token keys and values.
- ``noisy_recall``: noise tokens from their own vocabulary fall between the pairs and
  must be ignored.
- ``fuzzy_recall``: keys and values are spans of several tokens, so a key is only
  recognised by its whole span. MAD varies span lengths; here they are fixed per task,
  which keeps batches rectangular and the answer positions exact.

Scoring (next-token view, ``targets = seq[1:]``): the last token of a repeated key
predicts the first value token, and each value token but the last predicts the next.
The first occurrence of a key is not scored (its value cannot be known).

Token ids: 0 = blank (unused here, kept for a shared layout), then keys, values, noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .base import IGNORE_INDEX, Task


@dataclass(frozen=True)
class InContextRecall(Task):
    name = "in_context_recall"

    num_pairs: int = 16
    num_keys: int = 8  # distinct keys per sequence, so most keys come back
    num_key_tokens: int = 8
    num_values: int = 8
    key_len: int = 1
    value_len: int = 1
    num_noise: int = 0  # noise tokens between the pairs
    num_noise_tokens: int = 0  # size of the noise vocabulary

    def __post_init__(self) -> None:
        if min(self.num_pairs, self.num_keys, self.num_values, self.key_len, self.value_len) < 1:
            raise ValueError(f"{self.name}: sizes must be >= 1")
        if self.num_key_tokens**self.key_len < self.num_keys:
            raise ValueError(
                f"{self.name}: {self.num_key_tokens} key tokens make fewer than "
                f"num_keys={self.num_keys} distinct spans of length {self.key_len}"
            )
        if self.num_key_tokens**self.key_len > 1_000_000:
            raise ValueError(f"{self.name}: key space too large to sample without repeats")
        if self.num_noise < 0 or (self.num_noise and self.num_noise_tokens < 1):
            raise ValueError(f"{self.name}: noise needs num_noise_tokens >= 1")

    @property
    def vocab_size(self) -> int:  # type: ignore[override]
        return 1 + self.num_key_tokens + self.num_values + self.num_noise_tokens

    @property
    def seq_len(self) -> int:  # type: ignore[override]
        return self.num_pairs * (self.key_len + self.value_len) + self.num_noise - 1

    @property
    def chance_accuracy(self) -> float:  # type: ignore[override]
        return 1.0 / self.num_values

    @property
    def value_offset(self) -> int:
        return 1 + self.num_key_tokens

    @property
    def noise_offset(self) -> int:
        return 1 + self.num_key_tokens + self.num_values

    def batch(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        B, P, K = batch_size, self.num_pairs, self.num_keys
        span = self.key_len + self.value_len
        total = self.seq_len + 1

        # K distinct key spans per sequence: distinct integers written in base num_key_tokens.
        key_codes = torch.rand(B, self.num_key_tokens**self.key_len, generator=generator)
        key_codes = key_codes.argsort(dim=1)[:, :K]
        digits = self.num_key_tokens ** torch.arange(self.key_len - 1, -1, -1)
        key_spans = (key_codes[..., None] // digits) % self.num_key_tokens + 1  # (B, K, kl)
        value_spans = (
            torch.randint(self.num_values, (B, K, self.value_len), generator=generator) + self.value_offset
        )

        which = torch.randint(K, (B, P), generator=generator)  # the key of each pair
        pairs = torch.cat(
            [
                key_spans.gather(1, which[..., None].expand(-1, -1, self.key_len)),
                value_spans.gather(1, which[..., None].expand(-1, -1, self.value_len)),
            ],
            dim=2,
        )  # (B, P, span)

        # Noise tokens fall into the P + 1 gaps around the pairs; pair j moves right by
        # the number of noise tokens in gaps 0..j.
        if self.num_noise:
            gaps = torch.randint(P + 1, (B, self.num_noise), generator=generator)
            shift = F.one_hot(gaps, P + 1).sum(1).cumsum(1)[:, :P]
            seq = torch.randint(self.num_noise_tokens, (B, total), generator=generator) + self.noise_offset
        else:
            shift = torch.zeros(B, P, dtype=torch.int64)
            seq = torch.zeros(B, total, dtype=torch.int64)
        start = span * torch.arange(P) + shift  # (B, P)
        positions = start[..., None] + torch.arange(span)  # (B, P, span)
        seq.scatter_(1, positions.flatten(1), pairs.flatten(1))

        # A pair is scored when its key already occurred in an earlier pair.
        seen = F.one_hot(which, K).cumsum(1) - F.one_hot(which, K)
        repeated = seen.gather(2, which[..., None]).squeeze(2) > 0  # (B, P)
        # Predicting positions: last key token and all value tokens but the last.
        predictors = positions[..., self.key_len - 1 : span - 1]  # (B, P, value_len)
        answers = pairs[..., self.key_len :]
        inputs = seq[:, :-1].contiguous()
        targets = torch.full_like(inputs, IGNORE_INDEX)
        mask = repeated[..., None].expand_as(predictors)
        targets[torch.arange(B)[:, None, None].expand_as(predictors)[mask], predictors[mask]] = answers[mask]
        return inputs, targets


@dataclass(frozen=True)
class NoisyRecall(InContextRecall):
    name = "noisy_recall"

    num_noise: int = 16
    num_noise_tokens: int = 8


@dataclass(frozen=True)
class FuzzyRecall(InContextRecall):
    name = "fuzzy_recall"

    num_pairs: int = 8
    num_key_tokens: int = 4
    key_len: int = 2
    value_len: int = 2
