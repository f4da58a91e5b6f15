"""A builder for the GPU packing tests (shipped to Ray workers by value: no pytest here).

``rendezvous:DIR:NAME:PEERS`` leaves ``DIR/NAME`` and waits until ``PEERS`` candidates have
left theirs, then builds a tiny model: it succeeds only when that many candidates run at the
same time, so concurrency is shown without timing anything.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from dogma_evolve.evaluation import get_task
from dogma_evolve.evaluation.reference_models import TinyAttentionLM

VOCAB = get_task("mqar").vocab_size
SEQ_LEN = get_task("mqar").seq_len
WAIT_S = 90.0


def build(genome_yaml: str):
    kind, folder, name, peers = genome_yaml.split(":")
    if kind != "rendezvous":
        raise ValueError(f"unknown kind {kind!r}")
    if torch.get_default_device().type != "meta":  # the driver's memory estimate builds too
        (Path(folder) / name).write_text("here")
        deadline = time.monotonic() + WAIT_S
        while len(list(Path(folder).iterdir())) < int(peers):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: the other candidates never ran beside it")
            time.sleep(0.1)
    return TinyAttentionLM(VOCAB, SEQ_LEN), VOCAB, SEQ_LEN
