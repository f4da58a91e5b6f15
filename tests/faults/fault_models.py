"""A builder whose "genome" text names the fault to inject (shipped to Ray workers by value,
so it must not depend on pytest). Markers in a folder make a fault happen once only."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import torch
from torch import nn

from dogma_evolve.evaluation import TransientFailure, get_task
from dogma_evolve.evaluation.reference_models import TinyAttentionLM

VOCAB = get_task("mqar").vocab_size
SEQ_LEN = get_task("mqar").seq_len


def _first_time(folder: str, name: str) -> bool:
    """True the first time in ``folder`` (every call is logged, one pid per line)."""
    with (Path(folder) / f"{name}.calls").open("a") as log:
        log.write(f"{os.getpid()}\n")
    marker = Path(folder) / name
    if marker.exists():
        return False
    marker.write_text(str(os.getpid()))
    return True


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


class CudaOOMModel(TinyAttentionLM):
    """A tiny model whose forward fails the way the CUDA caching allocator does when a
    candidate needs more GPU memory than is left (``torch.OutOfMemoryError``), after its
    activations exist, as a real out-of-memory step would be."""

    def forward(self, ids):
        super().forward(ids)
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 139.72 GiB"
        )


def build(genome_yaml: str):
    kind, _, folder = genome_yaml.partition(":")
    tiny = (TinyAttentionLM(VOCAB, SEQ_LEN), VOCAB, SEQ_LEN)
    if kind == "tiny":
        return tiny
    if kind == "sigkill-once":
        if _first_time(folder, kind):
            os.kill(os.getpid(), signal.SIGKILL)
        return tiny
    if kind == "sigkill-always":
        _first_time(folder, kind)
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "sigstop-once":  # a hung worker: alive to Ray, silent to the heartbeat board
        if _first_time(folder, kind):
            os.kill(os.getpid(), signal.SIGSTOP)
        return tiny
    if kind == "broken-on-first-node":  # a node whose environment is broken (an import fails)
        node = _node_id()
        with (Path(folder) / f"{kind}.calls").open("a") as log:
            log.write(f"{node}\n")
        broken = Path(folder) / kind
        if not broken.exists():
            broken.write_text(node)
        if broken.read_text() == node:
            raise ModuleNotFoundError(f"No module named 'scipy' (broken on node {node[:12]})")
        return tiny
    if kind == "raise":
        _first_time(folder, kind)
        raise RuntimeError("loss exploded in layer 3")
    if kind == "transient-once":
        if _first_time(folder, kind):
            raise TransientFailure("scratch disk unavailable")
        return tiny
    if kind == "cuda-oom":
        _first_time(folder, kind)
        return CudaOOMModel(VOCAB, SEQ_LEN), VOCAB, SEQ_LEN
    if kind == "huge-alloc":  # asks the allocator for 4 PiB
        _first_time(folder, kind)
        nn.Linear(1 << 25, 1 << 25)
    raise ValueError(f"unknown fault {kind!r}")
