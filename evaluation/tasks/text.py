"""The default fitness: held-out English-text loss, as a share of what context can explain.

``text`` is byte-level language modelling on the English corpus (`evaluation.tasks.corpus`:
the King James Bible and 106 Wikipedia articles, split by document) with two differences
from ``bytelm_en``, both part of what the name means:

* **its quality is a loss, not an accuracy.** With ``L`` the held-out cross-entropy (nats per
  byte, the mean over sources) and ``U`` the held-out cross-entropy of the training text's
  byte frequencies (the best model that ignores the context, add-one smoothed; the mean over
  sources, as ``L`` is), ::

      quality = 1 - L / U

  0 for a model that learned the byte frequencies and nothing else, 1 for a perfect one,
  negative for one worse than the frequencies. It is monotone in ``L``, so it ranks
  candidates exactly as the held-out loss does (`evolve calibrate --against` measured
  why this matters: the loss ranks the space as compute-optimal English-text loss does,
  next-byte accuracy a little less well, the synthetic suite not at all);
* **16 sequences of 64 bytes a step** (``bytelm`` trains on 32): the suite's tokens per
  step, so that the default run's 300 steps cost what the suite's did.

``U`` is about 3.1 nats (4.5 bits) per byte on this corpus; an untrained model starts near
``ln 257`` (quality about -0.8). The calibration behind the default is in docs/results.md
("Does the fitness mean language?").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import torch

from .bytelm import ByteLM


@dataclass(frozen=True)
class EnglishText(ByteLM):
    name = "text"
    train_batch_size: ClassVar[int] = 16

    corpus_name: str = "english"

    def __post_init__(self) -> None:
        if self.path or self.corpus_name != "english":
            raise ValueError("text: the default fitness is the English corpus; use bytelm for another text")
        super().__post_init__()

    @cached_property
    def unigram_loss(self) -> float:
        """``U`` (module docstring): nats per byte, the mean over sources of the held-out
        text's cross-entropy under the training text's add-one byte frequencies."""
        counts = torch.bincount(self.train_text.long(), minlength=256).double() + 1.0
        log_p = torch.log(counts / counts.sum())
        losses = [float(-log_p[held.long()].mean()) for _, _, held in self.sources]
        return sum(losses) / len(losses)

    def quality_of_loss(self, loss: float) -> float:
        """``1 - loss / U``: the share of the frequencies' loss that the context explains."""
        if not math.isfinite(loss):
            return float("nan")
        return 1.0 - loss / self.unigram_loss
