"""Misbehaving models and a builder that picks one by its "genome" text (test helpers).

The pool tests ship ``build`` to Ray workers by value, so it must not depend on pytest.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from torch import nn

from dogma_evolve.evaluation import get_task
from dogma_evolve.evaluation.reference_models import TinyAttentionLM

VOCAB = get_task("mqar").vocab_size
SEQ_LEN = get_task("mqar").seq_len


class NaNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, VOCAB)

    def forward(self, ids):
        return self.embed(ids) * float("nan")


class SleepingModel(nn.Module):
    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds
        self.embed = nn.Embedding(VOCAB, VOCAB)

    def forward(self, ids):
        time.sleep(self.seconds)
        return self.embed(ids)


class RaisingModel(nn.Module):
    def __init__(self, error):
        super().__init__()
        self.error = error
        self.embed = nn.Embedding(VOCAB, VOCAB)

    def forward(self, ids):
        raise self.error


def build(genome_yaml: str):
    """``kind[:argument]`` -> a model. ``kill-once:DIR`` SIGKILLs its own process the
    first time (leaving a marker in DIR) and builds a working model on the retry."""
    kind, _, argument = genome_yaml.partition(":")
    if kind == "tiny":
        return TinyAttentionLM(VOCAB, SEQ_LEN), VOCAB, SEQ_LEN
    if kind == "nan":
        return NaNModel()
    if kind == "sleep":
        return SleepingModel(float(argument))
    if kind == "crash":
        return RaisingModel(RuntimeError("boom in forward"))
    if kind == "cuda-oom":
        return RaisingModel(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    if kind == "invalid":
        raise ValueError("genome: region 'r9' has no bases")
    if kind == "small-vocab":
        return TinyAttentionLM(VOCAB - 1, SEQ_LEN), VOCAB - 1
    if kind == "short-context":
        return TinyAttentionLM(VOCAB, SEQ_LEN), VOCAB, SEQ_LEN - 1
    if kind == "kill-once":
        attempts = Path(argument) / "attempts"
        with attempts.open("a") as log:
            log.write(f"{os.getpid()}\n")
        marker = Path(argument) / "killed"
        if not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return TinyAttentionLM(VOCAB, SEQ_LEN), VOCAB
    raise AssertionError(f"unknown test genome {genome_yaml!r}")
