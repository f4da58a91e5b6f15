"""The initial population: scaled-down presets plus random valid genomes under a budget.

Presets are shrunk to the search's scale (width, depth) and pinned to the task's
vocabulary and context, keeping their architecture: gpt2-small stays a learned-position,
LayerNorm, GELU transformer; llama3-8b a RoPE, RMSNorm, GQA + SwiGLU transformer;
mamba-130m an attention-free Mamba stack.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from evolution.spaces.dogma.operators import random_base
from genome import PRESETS, Genome, GenomeError
from phenotype import account

Doc = dict[str, Any]

SEED_WIDTHS = (32, 48, 64, 96)
SEED_PRESETS = ("gpt2-small", "llama3-8b", "mamba-130m")


def scale_down(doc: Doc, d_model: int, copies: int, pinned: dict[str, Any]) -> Doc:
    """The same architecture at width `d_model` and `copies` copies of each coding region.

    Per-head widths keep their ratio to the heads, hidden widths their ratio to d_model,
    and a RoPE base its ratio to the context (`rope_theta * max_len / preset max_len`)."""
    doc = copy.deepcopy(doc)
    structural = doc["regions"][0]["settings"]
    ratio = d_model / structural["d_model"]
    if "rope_theta" in structural and "max_len" in pinned and structural.get("max_len"):
        # RoPE's base scales with the context: the slowest rotation keeps its ratio to the
        # longest context (Llama 3's 500k at 8k tokens would barely rotate over 64).
        theta = structural["rope_theta"] * pinned["max_len"] / structural["max_len"]
        structural["rope_theta"] = float(max(100.0, round(theta)))
    structural.update(d_model=d_model, **pinned)
    for r in doc["regions"]:
        if r["type"] == "promoter":
            r["settings"]["copies"] = min(r["settings"].get("copies", 1), copies)
        for b in r.get("bases", []):
            p = b.setdefault("params", {})
            if b["kind"] == "attention":
                heads = max(1, min(p.get("heads", 4), d_model // 16))
                kv = p.get("kv_heads") or heads
                p.update(heads=heads, kv_heads=max(1, min(kv, heads)), head_dim=d_model // heads)
            elif "hidden" in p:
                p["hidden"] = max(8, int(p["hidden"] * ratio) // 8 * 8)
            elif b["kind"] == "mamba":
                p["dt_rank"] = 0  # re-derived: ceil(d_model / 16)
    return doc


def random_genome(rng: random.Random, pinned: dict[str, Any], max_params: int, tries: int = 50) -> Genome:
    """A random valid genome under `max_params`: 1-2 coding regions of 1-3 bases each,
    sometimes with a promoter and a regulatory region."""
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
            bases = [random_base(rng.choice("TTA"), rng) for _ in range(rng.randint(1, 3))]
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
    size: int, rng: random.Random, pinned: dict[str, Any], max_params: int
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
        out.append(random_genome(rng, pinned, max_params))
    return out[:size]
