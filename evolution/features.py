"""Cheap numeric features of a genome, the inputs of the search's surrogate model.

Nothing is built or trained: a DOGMA genome is read through its canonical document
(`Genome.to_dict()`) and its analytic accounting (`phenotype.account`); a NAS-Bench-201
cell through its six edge operations. Every feature is a float in a flat dict, named so
that `sklearn.feature_extraction.DictVectorizer` can stack genomes of any shape.

DOGMA features (`dogma_features`); every genome gets the same key set, built from the
schema tables (`genome.KINDS`, `genome.STRUCTURAL`, `genome.EDGE_KINDS`), so absent
things are explicit zeros:

- accounting at `seq_len` (natural log of 1 + x): `log_params`, `log_active_params`,
  `log_flops_per_token`, `log_state_bytes` (all inference state at `seq_len` tokens:
  per-token state x seq_len + fixed state), `log_state_bytes_per_token`,
  `log_state_bytes_fixed`;
- structural settings: `d_model`, `log_vocab`, `log_max_len`, `log_rope_theta`, `bias`
  and `tie_embeddings` (0/1), and one-hots `positions=<choice>`, `norm=<choice>`,
  `norm_position=<choice>` over every choice the schema admits;
- expression: `layers` (expressed layers: promoter copies x bases, summed over expressed
  coding regions), `coding_regions`, `silenced_regions` (promoter `expressed: false`),
  `max_copies`, `mean_strength` (promoter strength averaged over expressed coding regions;
  1.0 when there are none), `regulatory_regions`, `regulatory_bases`;
- blocks, counted over expressed layers (a base in a region of 3 copies counts 3):
  `kind:<kind>` for every gene kind, and by role `mixers:sequence` (T bases),
  `mixers:channel` (A bases), `mixers:expression` (G bases); regulatory bases (C) count
  once each in `kind:<kind>`; `attention_windowed` (attention or strand attention with a
  sliding window), `attention_grouped` (attention with 0 < kv_heads < heads: GQA or MQA),
  `moe_experts` and `moe_top_k` (the largest over MoE blocks, 0 without MoE);
- the regulatory graph: `edges:<kind>` for every edge kind (activates, represses,
  shares, loop), `has_shares` and `has_loop` (0/1).

NAS-Bench-201 features (`nb201_features`): `edge<k>=<op>` one-hots (6 edges x 5 ops = 30),
`count:<op>` (edges carrying each op), `live:<op>` (ops other than none on edges that lie on a path from
the input node to the output node through non-`none` edges: the ops that can influence
the output), `connected` (such a path exists), `live_paths` (how many of the four
input-to-output paths are live), `nonskip_path` (a live path with an op other than
skip_connect: the cell computes something beyond the identity), `max_path_convs` (most
convolutions on one live path: the cell's effective depth).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from evolution.nb201 import EDGES, OPS, CellGenome
from genome import EDGE_KINDS, KINDS, PROMOTER, STRUCTURAL, Genome
from phenotype import account

ROLE_OF_BASE = {"T": "mixers:sequence", "A": "mixers:channel", "G": "mixers:expression"}
_WINDOWED_KINDS = ("attention", "strand_attention")


def _log1p(x: float) -> float:
    return math.log1p(max(float(x), 0.0))


def _choices(name: str) -> tuple[str, ...]:
    return STRUCTURAL[name].choices


def dogma_features(genome: Genome, seq_len: int) -> dict[str, float]:
    """Features of a DOGMA genome at context length `seq_len` (see the module docstring)."""
    doc = genome.to_dict()
    acc = account(genome, seq_len)
    f: dict[str, float] = {
        "log_params": _log1p(acc.params),
        "log_active_params": _log1p(acc.active_params),
        "log_flops_per_token": _log1p(acc.flops_per_token),
        "log_state_bytes": _log1p(acc.state_bytes_per_token * seq_len + acc.state_bytes_fixed),
        "log_state_bytes_per_token": _log1p(acc.state_bytes_per_token),
        "log_state_bytes_fixed": _log1p(acc.state_bytes_fixed),
    }

    regions: list[Mapping[str, Any]] = doc["regions"]
    structural: dict[str, Any] = {k: s.default for k, s in STRUCTURAL.items()}
    for r in regions:
        if r["type"] == "structural":
            structural.update(r.get("settings", {}))
            break
    f["d_model"] = float(structural["d_model"])
    f["log_vocab"] = _log1p(structural["vocab"])
    f["log_max_len"] = _log1p(structural["max_len"])
    f["log_rope_theta"] = _log1p(structural["rope_theta"])
    f["bias"] = float(bool(structural["bias"]))
    f["tie_embeddings"] = float(bool(structural["tie_embeddings"]))
    for name in ("positions", "norm", "norm_position"):
        for choice in _choices(name):
            f[f"{name}={choice}"] = float(structural[name] == choice)

    for kind in KINDS:
        f[f"kind:{kind}"] = 0.0
    for role in ROLE_OF_BASE.values():
        f[role] = 0.0
    layers = coding = silenced = regulatory = regulatory_bases = 0
    max_copies = 0
    strengths: list[float] = []
    windowed = grouped = experts = top_k = 0
    promoter_defaults = {k: s.default for k, s in PROMOTER.items()}
    previous: Mapping[str, Any] | None = None
    for r in regions:
        if r["type"] == "coding":
            coding += 1
            expression = dict(promoter_defaults)
            if previous is not None and previous["type"] == "promoter":
                expression.update(previous.get("settings", {}))
            if not expression["expressed"]:
                silenced += 1
            else:
                copies = int(expression["copies"])
                max_copies = max(max_copies, copies)
                strengths.append(float(expression["strength"]))
                for base in r.get("bases", []):
                    kind, params = base["kind"], base.get("params", {})
                    layers += copies
                    f[f"kind:{kind}"] = f.get(f"kind:{kind}", 0.0) + copies
                    base_role = ROLE_OF_BASE.get(base["base"])
                    if base_role is not None:
                        f[base_role] += copies
                    if kind in _WINDOWED_KINDS and params.get("window", 0) > 0:
                        windowed += copies
                    if kind == "attention" and 0 < params.get("kv_heads", 0) < params.get("heads", 0):
                        grouped += copies
                    if kind == "moe":
                        experts = max(experts, int(params.get("experts", 0)))
                        top_k = max(top_k, int(params.get("top_k", 0)))
        elif r["type"] == "regulatory":
            regulatory += 1
            for base in r.get("bases", []):
                regulatory_bases += 1
                f[f"kind:{base['kind']}"] = f.get(f"kind:{base['kind']}", 0.0) + 1.0
        previous = r
    f["layers"] = float(layers)
    f["coding_regions"] = float(coding)
    f["silenced_regions"] = float(silenced)
    f["max_copies"] = float(max_copies)
    f["mean_strength"] = sum(strengths) / len(strengths) if strengths else 1.0
    f["regulatory_regions"] = float(regulatory)
    f["regulatory_bases"] = float(regulatory_bases)
    f["attention_windowed"] = float(windowed)
    f["attention_grouped"] = float(grouped)
    f["moe_experts"] = float(experts)
    f["moe_top_k"] = float(top_k)

    for kind in EDGE_KINDS:
        f[f"edges:{kind}"] = 0.0
    for edge in doc.get("edges", []):
        f[f"edges:{edge['kind']}"] = f.get(f"edges:{edge['kind']}", 0.0) + 1.0
    f["has_shares"] = float(f.get("edges:shares", 0.0) > 0)
    f["has_loop"] = float(f.get("edges:loop", 0.0) > 0)
    return f


# The four input-to-output paths of a NAS-Bench-201 cell, as indices into EDGES.
_NODES = 1 + max(dst for _, dst in EDGES)


def _paths(src: int, dst: int) -> list[list[int]]:
    if src == dst:
        return [[]]
    out: list[list[int]] = []
    for k, (a, b) in enumerate(EDGES):
        if a == src:
            out.extend([k, *rest] for rest in _paths(b, dst))
    return out


CELL_PATHS: tuple[tuple[int, ...], ...] = tuple(tuple(p) for p in _paths(0, _NODES - 1))
_CONVS = ("nor_conv_1x1", "nor_conv_3x3")


def nb201_features(cell: CellGenome) -> dict[str, float]:
    """Features of a NAS-Bench-201 cell (see the module docstring): 30 edge one-hots plus
    per-op counts and the connectivity summaries; the key set is the same for every cell."""
    f: dict[str, float] = {}
    for k, op in enumerate(cell.ops):
        for choice in OPS:
            f[f"edge{k}={choice}"] = float(op == choice)
    for choice in OPS:
        f[f"count:{choice}"] = float(sum(op == choice for op in cell.ops))
    live_paths = [p for p in CELL_PATHS if all(cell.ops[k] != "none" for k in p)]
    live_edges = {k for p in live_paths for k in p}
    for choice in OPS[1:]:  # a live edge is never none
        f[f"live:{choice}"] = float(sum(cell.ops[k] == choice for k in live_edges))
    f["connected"] = float(bool(live_paths))
    f["live_paths"] = float(len(live_paths))
    f["nonskip_path"] = float(any(any(cell.ops[k] != "skip_connect" for k in p) for p in live_paths))
    f["max_path_convs"] = float(max((sum(cell.ops[k] in _CONVS for k in p) for p in live_paths), default=0))
    return f
