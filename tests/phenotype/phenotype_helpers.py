"""Small genomes and measuring helpers shared by the phenotype tests."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils.flop_counter import FlopCounterMode

import kernels
from genome import KINDS, Genome
from phenotype import model_config
from phenotype.blocks.base import BlockConfig
from phenotype.config import CodingStage

# Every public kernel entry point: its work is the blocks' declared `extra_flops_per_token`,
# so the FLOP counter must not see inside it (the CPU path may or may not use matmuls).
KERNEL_OPS = ("selective_scan", "wkv", "wkv_with_state", "gated_linear_recurrence")


def genome_doc(
    bases: list[dict[str, Any]], d_model: int = 32, copies: int = 1, **structural: Any
) -> dict[str, Any]:
    settings = {"d_model": d_model, "vocab": 61, "max_len": 64, "positions": "rope", **structural}
    return {
        "regions": [
            {"id": "s0", "type": "structural", "settings": settings},
            {"id": "p1", "type": "promoter", "settings": {"copies": copies}},
            {"id": "c1", "type": "coding", "bases": bases},
        ]
    }


def block_genome(
    kind: str, params: dict[str, Any] | None = None, d_model: int = 32, **structural: Any
) -> Genome:
    base = KINDS[kind].bases[0]
    return Genome.from_dict(
        genome_doc([{"base": base, "kind": kind, "params": params or {}}], d_model, **structural)
    )


def block_config(
    kind: str, params: dict[str, Any] | None = None, d_model: int = 32, **structural: Any
) -> BlockConfig:
    stage = model_config(block_genome(kind, params, d_model, **structural)).stages[0]
    assert isinstance(stage, CodingStage)
    return stage.layers[0].block


def state_elements(state: Any) -> int:
    """Elements of every tensor in a (nested) state."""
    if isinstance(state, torch.Tensor):
        return state.numel()
    if isinstance(state, dict):
        return sum(state_elements(v) for v in state.values())
    if isinstance(state, list | tuple):
        return sum(state_elements(v) for v in state)
    return 0


@contextlib.contextmanager
def kernels_unseen(monkeypatch):
    """Run kernel ops outside any dispatch mode, so a FlopCounterMode does not count them."""

    def hidden(fn):
        def call(*args, **kwargs):
            with _disable_current_modes():
                return fn(*args, **kwargs)

        return call

    for name in KERNEL_OPS:
        if hasattr(kernels, name):
            monkeypatch.setattr(kernels, name, hidden(getattr(kernels, name)))
    # The fused LSTM/GRU are kernels too (opaque to the counter on some backends).
    fused = torch.nn.modules.rnn._VF

    class FusedHidden:
        lstm, gru = staticmethod(hidden(fused.lstm)), staticmethod(hidden(fused.gru))

        def __getattr__(self, name):
            return getattr(fused, name)

    monkeypatch.setattr(torch.nn.modules.rnn, "_VF", FusedHidden())
    yield


def counted_flops(fn, *args) -> int:
    """FLOPs FlopCounterMode counts for fn(*args), SDPA through its countable math path."""
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        fn(*args)
    return fc.get_total_flops()
