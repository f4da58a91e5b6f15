"""Cheap numeric features of a DOGMA genome, the inputs of the search's surrogate model.

Nothing is built or trained: a DOGMA genome is read through its canonical document
(`Genome.to_dict()`) and its analytic accounting (`phenotype.account`). A NAS-Bench-201
cell's features are its space's own (`evolution.spaces.nb201.nb201_features`). Every
feature is a float in a flat dict, named so that `sklearn.feature_extraction.DictVectorizer`
can stack genomes of any shape.

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
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dogma_evolve.genome import EDGE_KINDS, PROMOTER, STRUCTURAL, Genome
from dogma_evolve.genome.kinds import BUILT_IN
from dogma_evolve.phenotype import account

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

    for kind in BUILT_IN:  # a plugin kind is a column only where present (draws unchanged)
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
