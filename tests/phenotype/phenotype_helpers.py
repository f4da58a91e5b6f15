"""Small genomes and measuring helpers shared by the phenotype tests: the library's own
(`phenotype.contract`, which `evolve plugin check` runs too), under the names the tests use."""

from __future__ import annotations

import contextlib
from typing import Any

from dogma_evolve.genome import KINDS, Genome
from dogma_evolve.phenotype import contract
from dogma_evolve.phenotype.contract import block_config, counted_flops, genome_doc, state_elements

KERNEL_OPS = contract.KERNEL_OPS


def block_genome(
    kind: str, params: dict[str, Any] | None = None, d_model: int = 32, **structural: Any
) -> Genome:
    base = KINDS[kind].bases[0]
    return Genome.from_dict(
        genome_doc([{"base": base, "kind": kind, "params": params or {}}], d_model, **structural)
    )


@contextlib.contextmanager
def kernels_unseen(monkeypatch):
    """Run kernel ops outside any dispatch mode, so a FlopCounterMode does not count them
    (`phenotype.contract.kernels_unseen`; ``monkeypatch`` kept for the callers' form)."""
    with contract.kernels_unseen():
        yield


__all__ = ["block_config", "block_genome", "counted_flops", "genome_doc", "kernels_unseen", "state_elements"]
