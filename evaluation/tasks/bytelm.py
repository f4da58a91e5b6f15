"""Byte-level language modelling on real text that is available offline.

The text (``corpus`` setting, or ``path``, which wins when given) is one of:

* ``english`` (the task name ``bytelm_en``, the default of `evolve scale`, `run --ladder`
  and `benchmarks/scaling.py`): the King James Bible and 106 English Wikipedia articles
  that two pinned packages ship (`evaluation.tasks.corpus`: 6.0 MB of training text, 1.05
  MB held out), **split by document** (chapters, articles), held-out loss reported per
  source;
* ``pydoc`` (``bytelm``, the smoke-test corpus for tests): the English reference text of the
  Python documentation that every CPython installation ships (`pydoc_data.topics`, ~466 KB);
* a file the user names (``bytelm:PATH``).

Nothing is downloaded. For ``pydoc`` and a file, training windows come from the first 90 %
of the text and held-out windows from the last 10 % (one stream has no documents to split).

Tokens: bytes 0..255 are ids 0..255; id 256 begins every window (vocabulary 257). A window
is `seq_len` consecutive bytes at a random offset of the training text (the sources' texts
joined, so each source is drawn in proportion to its size); every position is scored on
predicting the next byte. Held-out windows (`eval_batches`) come from each source's held-out
text, ``num_batches // sources`` batches per source (at least 1), so the held-out loss is
the mean over sources and ``source_eval_batches`` gives each source's batches for its own
loss (``per_source_loss`` in the metrics, `evaluation.trainer.score`). `chance_accuracy` is
the accuracy of always predicting the corpus's most frequent byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from .base import Task, derive_seed

BOS = 256
MAX_CORPUS_BYTES = 64 << 20
HELD_OUT_FRACTION = 0.1
CORPORA = ("pydoc", "english")


def default_corpus() -> bytes:
    """The Python documentation's topic texts, in a fixed order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics)).encode("utf-8")


@dataclass(frozen=True)
class ByteLM(Task):
    name = "bytelm"

    path: str = ""  # a file; "" = the named ``corpus``
    seq_len: int = 64
    corpus_name: str = "pydoc"  # "pydoc" or "english" (module docstring)

    def __post_init__(self) -> None:
        if self.seq_len < 2:
            raise ValueError(f"bytelm: seq_len must be >= 2, got {self.seq_len}")
        if self.corpus_name not in CORPORA:
            raise ValueError(f"bytelm: corpus_name {self.corpus_name!r} is not one of {', '.join(CORPORA)}")
        held_out, total = self._sizes()
        for name, size in held_out:
            if size < 2 * self.seq_len:
                raise ValueError(
                    f"bytelm: the held-out text of {name} ({size} bytes) is too short for "
                    f"windows of {self.seq_len}"
                )
        if total < 20 * self.seq_len:
            raise ValueError(
                f"bytelm: corpus of {total} bytes is too short for "
                f"windows of {self.seq_len} (need {20 * self.seq_len})"
            )

    def _sizes(self) -> tuple[list[tuple[str, int]], int]:
        """(name, held-out bytes) per source and the whole corpus's bytes: the English corpus's
        from its pinned sizes (a stored run's settings are checked without reading the text),
        any other text's by reading it."""
        if not self.path and self.corpus_name == "english":
            from .corpus import HELD_OUT_MIN_BYTES, TOTAL_BYTES

            return [("english", HELD_OUT_MIN_BYTES)], TOTAL_BYTES
        return [(name, len(held)) for name, _, held in self.sources], len(self.corpus)

    @property
    def vocab_size(self) -> int:  # type: ignore[override]
        return 257

    @cached_property
    def sources(self) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        """(name, training bytes (N,) uint8, held-out bytes (M,) uint8) per source."""
        if not self.path and self.corpus_name == "english":
            from .corpus import english_sources

            return [(s.name, _tensor(s.train), _tensor(s.held_out)) for s in english_sources()]
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
        split = int(len(data) * (1 - HELD_OUT_FRACTION))
        return [("text", _tensor(data[:split]), _tensor(data[split:]))]

    @cached_property
    def train_text(self) -> torch.Tensor:
        """(N,) uint8: every source's training text, joined by a blank line."""
        gap = _tensor(b"\n\n")
        parts = [p for _, train, _ in self.sources for p in (train, gap)][:-1]
        return torch.cat(parts)

    @cached_property
    def corpus(self) -> torch.Tensor:
        """(N,) uint8 byte values of the whole corpus, training and held-out text."""
        return torch.cat([self.train_text, *(held for _, _, held in self.sources)])

    @property
    def train_split_tokens(self) -> int:
        """Tokens (bytes) of the training text: training on more repeats it."""
        return len(self.train_text)

    @property
    def chance_accuracy(self) -> float:  # type: ignore[override]
        return float(torch.bincount(self.corpus.long(), minlength=256).max()) / len(self.corpus)

    def _windows(
        self, generator: torch.Generator, batch_size: int, text: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows of ``text``: inputs BOS + bytes[:-1], targets bytes, (B, T) int64 each."""
        starts = torch.randint(0, len(text) - self.seq_len + 1, (batch_size,), generator=generator)
        rows = text[starts[:, None] + torch.arange(self.seq_len)].long()
        inputs = torch.cat([torch.full((batch_size, 1), BOS), rows[:, :-1]], dim=1)
        return inputs, rows

    def batch(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Training windows, from the training text."""
        return self._windows(generator, batch_size, self.train_text)

    def source_eval_batches(
        self, num_batches: int, batch_size: int, seed: int = 0
    ) -> dict[str, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Held-out windows per source: ``max(1, num_batches // sources)`` batches from each
        source's held-out text, each source from its own seeded stream."""
        if len(self.sources) == 1:
            return {self.sources[0][0]: self.eval_batches(num_batches, batch_size, seed)}
        per_source = max(1, num_batches // len(self.sources))
        out = {}
        for name, _, held_out in self.sources:
            generator = torch.Generator().manual_seed(derive_seed(self.name, "eval", seed, name))
            out[name] = [self._windows(generator, batch_size, held_out) for _ in range(per_source)]
        return out

    def eval_batches(
        self, num_batches: int, batch_size: int, seed: int = 0
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Held-out windows: every source's (``source_eval_batches``), in source order."""
        if len(self.sources) == 1:  # one stream: the task's eval generator, as before
            generator = self.eval_generator(seed)
            held_out = self.sources[0][2]
            return [self._windows(generator, batch_size, held_out) for _ in range(num_batches)]
        groups = self.source_eval_batches(num_batches, batch_size, seed)
        return [b for group in groups.values() for b in group]


def _tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)
