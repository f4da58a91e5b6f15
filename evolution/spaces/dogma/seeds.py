"""The initial population: scaled-down presets plus random valid genomes under a budget.

Presets are shrunk to the search's scale (width, depth) and pinned to the task's
vocabulary and context, keeping their architecture: gpt2-small stays a learned-position,
LayerNorm, GELU transformer; llama3-8b a RoPE, RMSNorm, GQA + SwiGLU transformer;
mamba-130m an attention-free Mamba stack.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from typing import Any

from dogma_evolve.evolution.spaces.dogma.guards import (
    SEED_WIDTHS,  # the one list: the structural step moves along it
)
from dogma_evolve.evolution.spaces.dogma.operators import random_base
from dogma_evolve.genome import PRESETS, Genome, GenomeError
from dogma_evolve.genome.resize import at_width, copies_at_most
from dogma_evolve.phenotype import account

Doc = dict[str, Any]

SEED_PRESETS = ("gpt2-small", "llama3-8b", "mamba-130m")


def scale_down(doc: Doc, d_model: int, copies: int, pinned: dict[str, Any]) -> Doc:
    """A preset's document at width `d_model` with at most `copies` copies of each coding
    region, pinned to the task (`genome.resize`: the one rule ladders use too)."""
    return copies_at_most(at_width(Genome.from_dict(doc).to_dict(), d_model, pinned), copies)


def random_genome(
    rng: random.Random,
    pinned: dict[str, Any],
    max_params: int,
    tries: int = 50,
    enabled: Collection[str] = (),
) -> Genome:
    """A random valid genome under `max_params`: 1-2 coding regions of 1-3 bases each (of
    built-in kinds and the ``enabled`` plugin kinds), sometimes with a promoter and a
    regulatory region."""
    for _ in range(tries):
        d = rng.choice(SEED_WIDTHS)
        regions: list[Doc] = [
            {
                "id": "s0",
                "type": "structural",
                "settings": {
                    "d_model": d,
                    "positions": rng.choice(("rope", "learned", "sinusoidal", "none")),
                    "norm": rng.choice(("rmsnorm", "layernorm")),
                    **pinned,
                },
            }
        ]
        edges: list[Doc] = []
        for k in range(rng.randint(1, 2)):
            if rng.random() < 0.3:
                regions.append({"id": f"p{k}", "type": "promoter", "settings": {"copies": rng.randint(1, 2)}})
            bases = [random_base(rng.choice("TTA"), rng, enabled=enabled) for _ in range(rng.randint(1, 3))]
            regions.append({"id": f"c{k}", "type": "coding", "bases": bases})
        if rng.random() < 0.25:
            target = next(r["id"] for r in regions if r["type"] == "coding")
            regions.insert(
                1, {"id": "r0", "type": "regulatory", "bases": [{"base": "C", "kind": "gate", "params": {}}]}
            )
            edges.append({"source": "r0", "target": target, "kind": rng.choice(("activates", "represses"))})
        try:
            genome = Genome.from_dict({"regions": regions, "edges": edges})
        except GenomeError:
            continue
        if account(genome).params <= max_params:
            return genome
    raise RuntimeError(f"no random genome under {max_params} parameters in {tries} tries")


def initial_population(
    size: int, rng: random.Random, pinned: dict[str, Any], max_params: int, enabled: Collection[str] = ()
) -> list[Genome]:
    """Scaled-down presets at two widths and depths first, then random genomes."""
    out: list[Genome] = []
    for name in SEED_PRESETS:
        for d_model, copies in ((64, 2), (32, 1)):
            if len(out) >= size // 2:
                break
            g = Genome.from_dict(scale_down(PRESETS[name](), d_model, copies, pinned))
            if account(g).params <= max_params:
                out.append(g)
    while len(out) < size:
        out.append(random_genome(rng, pinned, max_params, enabled=enabled))
    return out[:size]
