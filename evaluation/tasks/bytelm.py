"""Byte-level language modelling on real text that is available offline.

The corpus is a file the user names (`get_task("bytelm", path=...)`, or `--task
bytelm:PATH` on the command line), or by default the English reference text of the Python
documentation that every CPython installation ships (`pydoc_data.topics`, ~466 KB): real
prose with code, read from disk, never downloaded.

Tokens: bytes 0..255 are ids 0..255; id 256 begins every window (vocabulary 257). A window
is `seq_len` consecutive bytes at a random offset; every position is scored on predicting
the next byte. Training windows come from the first 90 % of the corpus, held-out windows
(`eval_batches`) from the last 10 %, so the score measures generalisation, not recall of
the training text. `chance_accuracy` is the accuracy of always predicting the corpus's most
frequent byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from .base import Task

BOS = 256
MAX_CORPUS_BYTES = 64 << 20
HELD_OUT_FRACTION = 0.1


def default_corpus() -> bytes:
    """The Python documentation's topic texts, in a fixed order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics)).encode("utf-8")


@dataclass(frozen=True)
class ByteLM(Task):
    name = "bytelm"

    path: str = ""  # "" = the Python documentation shipped with CPython
    seq_len: int = 64

    def __post_init__(self) -> None:
        if self.seq_len < 2:
            raise ValueError(f"bytelm: seq_len must be >= 2, got {self.seq_len}")
        if len(self.corpus) < 20 * self.seq_len:
            raise ValueError(
                f"bytelm: corpus of {len(self.corpus)} bytes is too short for "
                f"windows of {self.seq_len} (need {20 * self.seq_len})"
            )

    @property
    def vocab_size(self) -> int:  # type: ignore[override]
        return 257

    @cached_property
    def corpus(self) -> torch.Tensor:
        """(N,) int64 byte values of the whole corpus."""
        if self.path:
            try:
                with open(self.path, "rb") as f:
                    data = f.read(MAX_CORPUS_BYTES + 1)
            except OSError as error:
                raise ValueError(f"bytelm: cannot read {self.path}: {error.strerror}") from None
            if len(data) > MAX_CORPUS_BYTES:
                raise ValueError(f"bytelm: {self.path} is larger than {MAX_CORPUS_BYTES >> 20} MiB")
        else:
            data = default_corpus()
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()

    @property
    def _split(self) -> int:
        return int(len(self.corpus) * (1 - HELD_OUT_FRACTION))

    @property
    def train_split_tokens(self) -> int:
        """Tokens (bytes) of the training part of the corpus: training on more repeats it."""
        return self._split

    @property
    def chance_accuracy(self) -> float:  # type: ignore[override]
        return float(torch.bincount(self.corpus, minlength=256).max()) / len(self.corpus)

    def _windows(
        self, generator: torch.Generator, batch_size: int, lo: int, hi: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows whose bytes lie in corpus[lo:hi]: inputs BOS + bytes[:-1], targets bytes."""
        starts = torch.randint(lo, hi - self.seq_len + 1, (batch_size,), generator=generator)
        rows = self.corpus[starts[:, None] + torch.arange(self.seq_len)]
        inputs = torch.cat([torch.full((batch_size, 1), BOS), rows[:, :-1]], dim=1)
        return inputs, rows

    def batch(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Training windows, from the first 90 % of the corpus."""
        return self._windows(generator, batch_size, 0, self._split)

    def eval_batches(
        self, num_batches: int, batch_size: int, seed: int = 0
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Held-out windows, from the last 10 % of the corpus."""
        generator = self.eval_generator(seed)
        return [
            self._windows(generator, batch_size, self._split, len(self.corpus)) for _ in range(num_batches)
        ]
