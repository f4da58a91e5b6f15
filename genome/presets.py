"""Well-known architectures written as genomes (public configurations).

Presets seed populations and anchor the accounting: `phenotype.account` must reproduce
the published parameter counts of these models exactly (tests/phenotype/test_presets.py
recomputes them from the public configurations). The `-style` hybrids (jamba, griffin),
`dogma` and `dogma-byte` (the DOGMA scaling chapter's allocation study) follow published
layouts without claiming a published count; each docstring says where they differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dogma_evolve.genome.core import Genome
from dogma_evolve.genome.errors import GenomeError


def _doc(structural: dict[str, Any], layers: int, bases: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "regions": [
            {"id": "s0", "type": "structural", "settings": structural},
            {"id": "p1", "type": "promoter", "settings": {"copies": layers}},
            {"id": "c1", "type": "coding", "bases": bases},
        ],
    }


def gpt2_small() -> dict[str, Any]:
    """GPT-2 small (Radford et al., 2019): 124,439,808 parameters with tied embeddings."""
    return _doc(
        {
            "d_model": 768,
            "vocab": 50257,
            "max_len": 1024,
            "positions": "learned",
            "norm": "layernorm",
            "norm_position": "pre",
            "norm_eps": 1e-5,
            "bias": True,
            "tie_embeddings": True,
        },
        12,
        [
            {"base": "T", "kind": "attention", "params": {"heads": 12}},
            {"base": "A", "kind": "mlp", "params": {"hidden": 3072, "activation": "gelu"}},
        ],
    )


def llama3_8b() -> dict[str, Any]:
    """Llama 3 8B (Meta, 2024): 8,030,261,248 parameters, untied head."""
    return _doc(
        {
            "d_model": 4096,
            "vocab": 128256,
            "max_len": 8192,
            "positions": "rope",
            "rope_theta": 500000.0,
            "norm": "rmsnorm",
            "norm_position": "pre",
            "norm_eps": 1e-5,
            "bias": False,
            "tie_embeddings": False,
        },
        32,
        [
            {"base": "T", "kind": "attention", "params": {"heads": 32, "kv_heads": 8, "head_dim": 128}},
            {"base": "A", "kind": "swiglu", "params": {"hidden": 14336}},
        ],
    )


def mamba_130m() -> dict[str, Any]:
    """Mamba-130m (Gu & Dao, 2023): 24 Mamba layers, width 768, vocabulary 50277 padded to 50280."""
    return _doc(
        {
            "d_model": 768,
            "vocab": 50280,
            "max_len": 2048,
            "positions": "none",
            "norm": "rmsnorm",
            "norm_position": "pre",
            "norm_eps": 1e-5,
            "bias": False,
            "tie_embeddings": True,
        },
        24,
        [{"base": "T", "kind": "mamba", "params": {"d_state": 16, "expand": 2, "d_conv": 4, "dt_rank": 48}}],
    )


def mistral_7b() -> dict[str, Any]:
    """Mistral 7B v0.1 (Jiang et al., 2023): 7,241,732,096 parameters; GQA 32/8, a 4096-token
    sliding window, vocabulary 32000, RoPE θ = 10^4."""
    return _doc(
        {
            "d_model": 4096,
            "vocab": 32000,
            "max_len": 32768,
            "positions": "rope",
            "rope_theta": 10000.0,
            "norm": "rmsnorm",
            "norm_position": "pre",
            "norm_eps": 1e-5,
            "bias": False,
            "tie_embeddings": False,
        },
        32,
        [
            {
                "base": "T",
                "kind": "attention",
                "params": {"heads": 32, "kv_heads": 8, "head_dim": 128, "window": 4096},
            },
            {"base": "A", "kind": "swiglu", "params": {"hidden": 14336}},
        ],
    )


def mixtral_8x7b() -> dict[str, Any]:
    """Mixtral 8x7B (Jiang et al., 2024): 46,702,792,704 parameters, 12,879,925,248 active;
    Mistral's attention (no sliding window) and a top-2 mixture of 8 SwiGLU experts."""
    return _doc(
        {
            "d_model": 4096,
            "vocab": 32000,
            "max_len": 32768,
            "positions": "rope",
            "rope_theta": 1000000.0,
            "norm": "rmsnorm",
            "norm_position": "pre",
            "norm_eps": 1e-5,
            "bias": False,
            "tie_embeddings": False,
        },
        32,
        [
            {"base": "T", "kind": "attention", "params": {"heads": 32, "kv_heads": 8, "head_dim": 128}},
            {
                "base": "A",
                "kind": "moe",
                "params": {"experts": 8, "top_k": 2, "hidden": 14336, "expert": "swiglu", "aux_weight": 0.02},
            },
        ],
    )


def jamba() -> dict[str, Any]:
    """Jamba-style hybrid (Lieber et al., 2024; Jamba-v0.1 dimensions): blocks of 8 layers
    with attention : Mamba = 1 : 7 (attention fifth), a 16-expert top-2 MoE in every other
    layer, no positional encoding. Jamba's Mamba layers also RMS-normalise Δ, B and C
    (288 parameters per layer) which our Mamba does not."""
    mamba = {"base": "T", "kind": "mamba", "params": {"d_state": 16, "expand": 2, "d_conv": 4}}
    attention = {"base": "T", "kind": "attention", "params": {"heads": 32, "kv_heads": 8, "head_dim": 128}}
    mlp = {"base": "A", "kind": "swiglu", "params": {"hidden": 14336}}
    moe = {
        "base": "A",
        "kind": "moe",
        "params": {"experts": 16, "top_k": 2, "hidden": 14336, "expert": "swiglu", "aux_weight": 0.001},
    }
    mixers = [mamba, mamba, mamba, mamba, attention, mamba, mamba, mamba]
    bases = [b for i, m in enumerate(mixers) for b in (m, moe if i % 2 else mlp)]
    return _doc(
        {
            "d_model": 4096,
            "vocab": 65536,
            "max_len": 262144,
            "positions": "none",
            "norm": "rmsnorm",
            "norm_position": "pre",
            "norm_eps": 1e-6,
            "bias": False,
            "tie_embeddings": False,
        },
        4,
        bases,
    )


def griffin() -> dict[str, Any]:
    """Griffin-style hybrid (De et al., 2024; RecurrentGemma-2B dimensions): residual blocks
    of (RG-LRU, RG-LRU, local MQA attention with a 2048 window), each followed by a GeGLU
    MLP; 26 layers = 8 x 3 + 2 recurrent."""
    rglru = {"base": "T", "kind": "rglru", "params": {"width": 2560, "heads": 10, "d_conv": 4}}
    local = {
        "base": "T",
        "kind": "attention",
        "params": {"heads": 10, "kv_heads": 1, "head_dim": 256, "window": 2048},
    }
    mlp = {"base": "A", "kind": "geglu", "params": {"hidden": 7680}}
    doc = _doc(
        {
            "d_model": 2560,
            "vocab": 256000,
            "max_len": 8192,
            "positions": "rope",
            "norm": "rmsnorm",
            "norm_position": "pre",
            "norm_eps": 1e-6,
            "bias": False,
            "tie_embeddings": True,
        },
        8,
        [rglru, mlp, rglru, mlp, local, mlp],
    )
    doc["regions"].append({"id": "c2", "type": "coding", "bases": [rglru, mlp, rglru, mlp]})
    return doc


def rwkv4_169m() -> dict[str, Any]:
    """RWKV-4 169M (Peng et al., 2023; RWKV-4-Pile-169M): 169,342,464 parameters; 12 layers of
    time mixing + channel mixing, width 768, vocabulary 50277, LayerNorm on the embeddings
    (ln0) and before every mixer, untied head."""
    return _doc(
        {
            "d_model": 768,
            "vocab": 50277,
            "max_len": 1024,
            "positions": "none",
            "norm": "layernorm",
            "norm_position": "pre_embed",
            "norm_eps": 1e-5,
            "bias": True,
            "tie_embeddings": False,
        },
        12,
        [
            {"base": "T", "kind": "rwkv", "params": {}},
            {"base": "A", "kind": "rwkv_channel", "params": {"hidden": 3072}},
        ],
    )


def dogma() -> dict[str, Any]:
    """The DOGMA stack: four-path DNA compute blocks under regulation. A regulatory region
    (a gate and an allosteric router) expresses 6 copies of (DNA block, epigenetic memory,
    expression folder), then 2 copies of (strand attention, TetraMemory, expression folder).
    TetraMemory is the chapter's volumetric `tetra` (the causal cube's 8 bonds at 2 scales,
    the least rounds that cover the 4096-token context: 8); until genome format 2 it was the
    fixed-reach `tetra_reach` (window 2, stride 8, 2 levels, 2 rounds: 128 tokens back), under
    the id 407d012b95f1…"""
    return {
        "regions": [
            {
                "id": "s0",
                "type": "structural",
                "settings": {
                    "d_model": 512,
                    "vocab": 32000,
                    "max_len": 4096,
                    "positions": "rope",
                    "norm": "rmsnorm",
                    "norm_position": "pre",
                    "bias": False,
                    "tie_embeddings": True,
                },
            },
            {
                "id": "r1",
                "type": "regulatory",
                "bases": [
                    {"base": "C", "kind": "gate", "params": {"hidden": 32}},
                    {"base": "C", "kind": "allosteric", "params": {"k": 1, "width": 32}},
                ],
            },
            {"id": "p2", "type": "promoter", "settings": {"copies": 6}},
            {
                "id": "c2",
                "type": "coding",
                "bases": [
                    {
                        "base": "T",
                        "kind": "dna",
                        "params": {
                            "width": 256,
                            "reactions": 16,
                            "d_state": 8,
                            "species": 4,
                            "lanes": 8,
                            "window": 4,
                        },
                    },
                    {"base": "A", "kind": "epigenetic", "params": {"slots": 32}},
                    {"base": "G", "kind": "expression", "params": {"hidden": 1536}},
                ],
            },
            {"id": "p3", "type": "promoter", "settings": {"copies": 2}},
            {
                "id": "c3",
                "type": "coding",
                "bases": [
                    {"base": "T", "kind": "strand_attention", "params": {"heads": 8}},
                    {"base": "A", "kind": "tetra", "params": {"neighbours": 8, "scales": 2}},
                    {"base": "G", "kind": "expression", "params": {"hidden": 1536}},
                ],
            },
        ],
        "edges": [
            {"source": "r1", "target": "c2", "kind": "activates"},
            {"source": "c2", "target": "c3", "kind": "loop"},
        ],
    }


def dogma_byte() -> dict[str, Any]:
    """The DOGMA scaling chapter's allocation study (§15.6.4, Table 15.2; §15.6.5) at width 512:
    bytes (a 257-symbol vocabulary: 256 bytes and one special) in and out through untied
    257 x 512 tables, a 512-byte context (the chapter's T = 512, a mesh of 8³ sites), and 16
    blocks, each

        TetraMemory -> DNA compute -> epigenetic memory      (coding region m<i>)
        regulation gate + allosteric router                  (regulatory region r<i>)
        strand attention -> expression folder                (coding region e<i>, activated by r<i>)

    TetraMemory is the volumetric `tetra` (the causal cube's 8 bonds at 2 scales, the
    least rounds that cover the context: 4). Sizes follow the chapter's parameter allocation
    where our blocks can: per block, DNA compute 5.52M (88.3M / 16; 64 reactions, 32 species
    per automaton channel, 8 lanes of the 4 nucleotides), the regulation gate with its edge
    1.40M (22.4M / 16), strand attention 2.80M (44.8M / 16; 12 heads of 114), the expression
    folder 1.40M (22.4M / 16), epigenetic memory 0.53M (256 marks; 8.4M / 16) and the
    allosteric router 0.26M (4.2M / 16). TetraMemory cannot: its three d x d projections
    (0.79M) are what the block has, against the chapter's 2.1M. Where the chapter's FLOP
    table implies other sizes (its figures are far below what its own allocation computes),
    the allocation wins; `evolve genome show preset:dogma-byte --breakdown --seq-len 512`
    prints both, row by row. Each router reads every coding region before it and gates every
    one after it, so its FLOPs grow with depth (the chapter counts none for it). The chapter
    calls its design hypothetical; this genome is the closest reading of it our blocks build."""
    blocks = 16
    regions: list[dict[str, Any]] = [
        {
            "id": "s0",
            "type": "structural",
            "settings": {
                "d_model": 512,
                "vocab": 257,
                "max_len": 512,
                "positions": "rope",
                "norm": "rmsnorm",
                "norm_position": "pre",
                "bias": False,
                "tie_embeddings": False,
            },
        }
    ]
    edges: list[dict[str, Any]] = []
    tetra = {"base": "A", "kind": "tetra", "params": {"neighbours": 8, "scales": 2}}
    dna = {
        "base": "T",
        "kind": "dna",
        "params": {"width": 1472, "reactions": 64, "d_state": 32, "species": 4, "lanes": 8, "window": 8},
    }
    epigenetic = {"base": "A", "kind": "epigenetic", "params": {"slots": 256}}
    gate = {"base": "C", "kind": "gate", "params": {"hidden": 2727}}
    allosteric = {"base": "C", "kind": "allosteric", "params": {"k": 2, "width": 480}}
    strand = {"base": "T", "kind": "strand_attention", "params": {"heads": 12, "head_dim": 114}}
    expression = {"base": "G", "kind": "expression", "params": {"hidden": 1365}}
    for i in range(1, blocks + 1):
        regions += [
            {"id": f"m{i}", "type": "coding", "bases": [tetra, dna, epigenetic]},
            {"id": f"r{i}", "type": "regulatory", "bases": [gate, allosteric]},
            {"id": f"e{i}", "type": "coding", "bases": [strand, expression]},
        ]
        edges.append({"source": f"r{i}", "target": f"e{i}", "kind": "activates"})
    return {"regions": regions, "edges": edges}


PRESETS: dict[str, Callable[[], dict[str, Any]]] = {
    "gpt2-small": gpt2_small,
    "llama3-8b": llama3_8b,
    "mistral-7b": mistral_7b,
    "mixtral-8x7b": mixtral_8x7b,
    "mamba-130m": mamba_130m,
    "jamba": jamba,
    "griffin": griffin,
    "rwkv4-169m": rwkv4_169m,
    "dogma": dogma,
    "dogma-byte": dogma_byte,
}


def preset(name: str) -> Genome:
    """The named preset as a validated genome."""
    if name not in PRESETS:
        raise GenomeError(f"unknown preset {name!r:.40} (known: {', '.join(sorted(PRESETS))})")
    return Genome.from_dict(PRESETS[name]())


def load_genome(source: str) -> Genome:
    """`preset:NAME` or a path to a YAML genome file."""
    if source.startswith("preset:"):
        return preset(source.removeprefix("preset:"))
    try:
        with open(source, "rb") as f:
            data = f.read(2 << 20)
    except OSError as e:
        raise GenomeError(f"cannot read {source}: {e.strerror}") from None
    return Genome.from_yaml(data)
