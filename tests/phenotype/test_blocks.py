"""Registry-driven contract test: every registered block kind, built from a small genome.

For each kind (and a few variants that switch on optional paths) the built module must
keep the shape (B, T, D), stay finite, be causal, pass gradients to every parameter, give
the same outputs token by token through `step` as through `forward`, hold exactly
`state_size(T)` state elements after T steps, and match its config's analytic parameter
count and FLOPs (the latter against torch's FlopCounterMode).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from dogma_evolve.genome import KINDS
from dogma_evolve.phenotype import REGISTRY
from dogma_evolve.phenotype.contract import check_block, check_regulatory
from tests.phenotype.phenotype_helpers import block_config

# Variants beyond each kind's defaults: (kind, params, structural overrides).
VARIANTS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("attention", {"heads": 4, "kv_heads": 2}, {}),  # GQA
    ("attention", {"heads": 4, "kv_heads": 1, "qk_norm": True}, {}),  # MQA + QK-norm
    ("attention", {"heads": 4, "window": 4}, {}),  # sliding window
    ("attention", {"heads": 4}, {"positions": "alibi"}),
    ("attention", {"heads": 3, "head_dim": 8, "window": 5}, {"positions": "alibi"}),
    ("attention", {"heads": 2}, {"positions": "none", "bias": True}),
    ("mlp", {"activation": "relu", "hidden": 48}, {"bias": True}),
    ("mla", {"heads": 4, "q_rank": 12, "kv_rank": 10, "rope_dim": 4, "v_head_dim": 6}, {}),
    ("mla", {"heads": 2, "rope_dim": 0}, {"bias": True}),
    ("moe", {"experts": 4, "top_k": 1, "expert": "gelu", "hidden": 24}, {"bias": True}),
    ("moe", {"experts": 3, "top_k": 2, "expert": "geglu", "hidden": 16, "shared": 2}, {}),
    ("conv", {"kernel": 1}, {}),
    ("s4", {"d_state": 6, "init": "lin"}, {"bias": True}),
    ("lstm", {"hidden": 20}, {}),
    ("mamba2", {"head_dim": 16, "d_state": 8, "d_conv": 3}, {"bias": True}),
    ("rglru", {"width": 24, "heads": 3}, {"bias": True}),
    ("linear_attention", {"heads": 2, "feature": "relu"}, {}),
    ("retention", {"heads": 2, "v_head_dim": 32}, {}),
    ("rwkv_channel", {"hidden": 40}, {}),
    (
        "dna",
        {"width": 12, "reactions": 5, "d_state": 3, "species": 3, "lanes": 2, "window": 2},
        {"bias": True},
    ),
    ("dna", {"reactions": 4, "depth": 3, "lanes": 1}, {}),  # a strand-displacement cascade
    ("strand_attention", {"heads": 4, "kv_heads": 2, "window": 6, "scales": 2}, {"positions": "alibi"}),
    ("expression", {"hidden": 20, "activation": "silu"}, {"bias": True}),
    ("tetra_reach", {"window": 1, "stride": 3, "levels": 2, "rounds": 3}, {"bias": True}),
    ("tetra_reach", {"window": 0, "levels": 1, "rounds": 1}, {}),
    ("tetra", {"neighbours": 5, "scales": 3}, {"bias": True}),
    ("tetra", {"neighbours": 4, "scales": 1, "reach": 3.0}, {}),
    ("rglru", {"width": 8, "heads": 8}, {}),
]

B, T = 2, 11


def _cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    sequence_kinds = [k for k, spec in REGISTRY.items() if spec.role != "regulatory"]
    return [(k, {}, {}) for k in sorted(sequence_kinds)] + VARIANTS


def _case_id(case) -> str:
    kind, params, structural = case
    extra = ",".join(f"{k}={v}" for k, v in {**params, **structural}.items())
    return f"{kind}[{extra}]" if extra else kind


CASES = _cases()


def test_registry_and_schema_name_the_same_kinds():
    assert set(REGISTRY) == set(KINDS)
    for kind, spec in REGISTRY.items():
        assert spec.role in ("sequence", "channel", "regulatory"), kind


def _built(case, dtype=torch.float64):
    kind, params, structural = case
    cfg = block_config(kind, params, **structural)
    torch.manual_seed(0)
    module = cfg.build().to(dtype)
    return cfg, module


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_block_contract(case):
    """`phenotype.contract.check_block`: params (also on meta), shape, finiteness, gradients,
    causality, step == forward, state size, FLOPs; `evolve plugin check` runs the same."""
    cfg, _ = _built(case)
    assert [str(f) for f in check_block(cfg)] == []


REGULATORY = sorted(k for k, spec in REGISTRY.items() if spec.role == "regulatory")


@pytest.mark.parametrize("kind", REGULATORY)
def test_regulatory_contract(kind):
    """Regulatory kinds act between regions, so they are checked in a small model
    (`phenotype.contract.check_regulatory`): the regulated region's output stays causal,
    recurrent decoding equals the forward pass, every parameter learns, and accounting
    equals the module."""
    assert [str(f) for f in check_regulatory(kind)] == []
