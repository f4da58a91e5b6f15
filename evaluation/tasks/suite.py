"""The default fitness: a suite of mechanistic tasks, trained as one mixture, scored per task.

Members (re-sized to the regime where Zoology/MAD show they separate architectures:
contexts of 64 tokens, 8+ pairs, vocabularies of 18 to 257 tokens):

    mqar               8 key-value pairs, 128 keys, 128 values, 64 tokens
    selective_copying  8 data tokens scattered over 56 blanks, 16 values
    noisy_recall       16 pairs over 16 keys, 33 noise tokens between them
    fuzzy_recall       16 pairs of 2-token keys and 2-token values
    compression        32 values then 31 positional queries

All five need sequence mixing: a model that sees only the current token stays at chance.
Memorisation is left out of the default on purpose: a key -> value table is a bigram that
the embedding and head alone store, so it does not separate sequence mixers, and it would
lift an MLP-only model well above chance.

**One mixture, not five runs.** Each training batch mixes the members row by row
(row r of a batch holds member (r + offset) mod 5, the offset drawn per batch), so one
candidate is trained once on all of them: five times cheaper than five runs on the same
tokens, which is what lets the default run search on a 2-core machine. Members keep their
own token layouts, moved into disjoint id ranges of one vocabulary (``offsets``), so every
sequence identifies its member by its tokens alone. Shorter members are padded on the
right with their own token 0, never scored; a causal model cannot see the padding.

**Scoring.** Each member is scored on its own held-out batches; its *normalised accuracy*
is ``(accuracy - chance) / (1 - chance)`` (chance -> 0, perfect -> 1; slightly negative
below chance, not clipped, so that the mean stays unbiased). The suite's quality is the
mean over members (``score_components``).

**Calibration** at the default budget (300 steps of 16 sequences, the learning rate by
width of ``evaluation.budget``, seed 0, one CPU thread; held-out quality):

    MLP-only yardstick (reference_models.MLPOnlyLM, width 64)        0.006
    TinyAttentionLM (2 layers, width 64, learned positions)          0.053
    scaled-down GPT-2 seed (width 32, 1 copy, 23k parameters)        0.332
    scaled-down Llama seed (width 32, 1 copy, RoPE, SwiGLU, untied)  0.066
    scaled-down Mamba seed (width 32, 1 copy)                        0.018
    best genome of the default initial population (64 genomes)       0.332

The targets were: MLP-only <= 0.05 (met), the Llama-style seed between 0.2 and 0.6 (missed:
0.066; the width-64 Llama seed reaches 0.19 at 800 steps, which do not fit the default run),
no initial genome above 0.8 (met). Why the Llama seed misses (ablated one component at a time
between the two seeds, two seeds each): compression asks for the value at an absolute
position and the suite has no start token, so a rotary model, whose scores depend only on
offsets, stays near chance on it (0.01-0.12) where learned positions solve it (0.999): about
0.2 of quality. Its untied output head costs about 0.07 more (untied token embeddings start
at spread 1.0, tied ones at d^-0.5). RMSNorm, SwiGLU and bias change under 0.05; GQA is
inactive at these widths (kv_heads = heads below width 144). The Llama seed with learned
positions and a tied head scores 0.333, as GPT-2 does. RoPE was checked against a float64
reference of the published rotation (3e-7) and its relative-position property (2e-7).
``tests/evaluation/test_eval_suite.py`` re-checks that an attention genome clears an MLP-only
one by >= 0.2. Seed-to-seed spread of one genome (4
seeds, 400 steps): sd 0.003 (GPT-2 seed, quality 0.36) and 0.014 (Llama seed, 0.09).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import torch

from .base import IGNORE_INDEX, Task, derive_seed
from .compression import Compression
from .copying import SelectiveCopying
from .mqar import MQAR
from .recall import FuzzyRecall, NoisyRecall

MEMBERS: tuple[Task, ...] = (
    MQAR(num_pairs=8, num_keys=64, num_values=64, seq_len=64),
    SelectiveCopying(num_tokens=8, num_values=16, context_len=56),
    NoisyRecall(
        num_pairs=16, num_keys=16, num_key_tokens=16, num_values=16, num_noise=33, num_noise_tokens=16
    ),
    FuzzyRecall(num_pairs=16, num_keys=8, num_key_tokens=4, num_values=8, key_len=2, value_len=2),
    Compression(length=32, num_values=16, num_queries=31),
)


def normalised_accuracy(accuracy: float, chance: float) -> float:
    """``(accuracy - chance) / (1 - chance)``: 0 at chance, 1 when perfect."""
    return (accuracy - chance) / (1.0 - chance)


@dataclass(frozen=True)
class Suite(Task):
    """The mixture of ``MEMBERS`` (see the module docstring). ``context`` pads every member
    to that many tokens (at least the longest member)."""

    name = "suite"
    train_batch_size: ClassVar[int] = 16

    context: int = 64

    def __post_init__(self) -> None:
        longest = max(m.seq_len for m in MEMBERS)
        if self.context < longest:
            raise ValueError(f"suite: context={self.context} < {longest}, the longest member")

    @property
    def members(self) -> tuple[Task, ...]:
        return MEMBERS

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        """First token id of each member's range in the shared vocabulary."""
        out, start = [], 0
        for m in MEMBERS:
            out.append(start)
            start += m.vocab_size
        return tuple(out)

    @property
    def vocab_size(self) -> int:  # type: ignore[override]
        return self.offsets[-1] + MEMBERS[-1].vocab_size

    @property
    def seq_len(self) -> int:  # type: ignore[override]
        return self.context

    @property
    def chance_accuracy(self) -> float:  # type: ignore[override]
        """Mean of the members' chance accuracies (the suite's quality is normalised)."""
        return sum(m.chance_accuracy for m in MEMBERS) / len(MEMBERS)

    def member_batch(
        self, index: int, generator: torch.Generator, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Member ``index``'s batch in the suite's vocabulary, padded to ``context``.

        inputs, targets: (batch_size, context) int64; padded targets are ``IGNORE_INDEX``.
        """
        member, offset = MEMBERS[index], self.offsets[index]
        inputs, targets = member.batch(generator, batch_size)
        pad = self.context - member.seq_len
        inputs = torch.nn.functional.pad(inputs + offset, (0, pad), value=offset)
        scored = targets != IGNORE_INDEX
        targets = torch.where(scored, targets + offset, targets)
        targets = torch.nn.functional.pad(targets, (0, pad), value=IGNORE_INDEX)
        return inputs, targets

    def batch(self, generator: torch.Generator, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows cycle through the members from a random first member: row r holds member
        ``(r + first) mod len(MEMBERS)``."""
        n = len(MEMBERS)
        first = int(torch.randint(n, (1,), generator=generator))
        inputs = torch.empty(batch_size, self.context, dtype=torch.int64)
        targets = torch.empty_like(inputs)
        for i in range(n):
            start = (i - first) % n
            if start < batch_size:  # a batch smaller than the suite skips some members
                rows = torch.arange(start, batch_size, n)
                inputs[rows], targets[rows] = self.member_batch(i, generator, len(rows))
        return inputs, targets

    @property
    def member_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in MEMBERS)

    def components(self) -> list[tuple[str, float]]:
        """(member name, chance accuracy) for each member, in order."""
        return [(m.name, m.chance_accuracy) for m in MEMBERS]

    def component_eval_batches(
        self, num_batches: int, batch_size: int, seed: int = 0
    ) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        """Held-out batches per member: ``[member][batch] -> (inputs, targets)``, each
        member's stream separate from every training stream and equal for every candidate."""
        out = []
        for member, i in zip(MEMBERS, range(len(MEMBERS)), strict=True):
            generator = torch.Generator().manual_seed(derive_seed(self.name, "eval", seed, member.name))
            out.append([self.member_batch(i, generator, batch_size) for _ in range(num_batches)])
        return out


def score_components(per_member: dict[str, float], task: Suite) -> dict[str, Any]:
    """Metrics from each member's raw accuracy: ``per_task`` (normalised, by member name),
    ``per_task_accuracy`` (raw) and ``quality`` (the mean normalised accuracy)."""
    chance = dict(task.components())
    normalised = {name: normalised_accuracy(acc, chance[name]) for name, acc in per_member.items()}
    return {
        "per_task": normalised,
        "per_task_accuracy": dict(per_member),
        "quality": sum(normalised.values()) / len(normalised),
    }
