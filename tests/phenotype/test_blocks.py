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

from genome import KINDS
from phenotype import REGISTRY
from tests.phenotype.phenotype_helpers import block_config, counted_flops, kernels_unseen, state_elements

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
def test_block_contract(case, monkeypatch):
    cfg, module = _built(case)
    d = cfg.d_model
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, d, dtype=torch.float64, generator=gen)

    # Parameters: analytic == built, also on the meta device (nothing allocated).
    assert cfg.num_params() == sum(p.numel() for p in module.parameters())
    with torch.device("meta"):
        assert cfg.num_params() == sum(p.numel() for p in cfg.build().parameters())
    assert 0 < cfg.active_params() <= cfg.num_params()

    # Shape, finiteness, gradients to every parameter (training mode).
    module.train()
    y = module(x)
    assert y.shape == (B, T, d) and torch.isfinite(y).all()
    (y * torch.randn(y.shape, dtype=y.dtype, generator=gen)).sum().backward()
    for name, p in module.named_parameters():
        assert p.grad is not None, f"no gradient reaches {name}"
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, f"zero gradient: {name}"

    module.eval()
    with torch.no_grad():
        y = module(x)
        # Causality: changing the future leaves the past unchanged.
        t = T // 2
        x2 = x.clone()
        x2[:, t + 1 :] += torch.randn(B, T - t - 1, d, dtype=x.dtype, generator=gen)
        y2 = module(x2)
        torch.testing.assert_close(y2[:, : t + 1], y[:, : t + 1], rtol=0, atol=1e-12)
        assert not torch.allclose(y2[:, t + 1 :], y[:, t + 1 :])

        # The recurrent form equals the parallel form, and holds what it says it holds.
        state = module.init_state(B)
        steps = []
        for i in range(T):
            y_t, state = module.step(x[:, i], state)
            steps.append(y_t)
        torch.testing.assert_close(torch.stack(steps, 1), y, rtol=1e-9, atol=1e-9)
        assert state_elements(state) == B * module.state_size(T) == B * cfg.state_elements(T)

    # FLOPs: what the counter sees equals the analytic count less the declared scan work.
    with kernels_unseen(monkeypatch):
        flops = counted_flops(module, x)
    assert flops == B * T * (cfg.flops_per_token(T) - cfg.extra_flops_per_token())


REGULATORY = sorted(k for k, spec in REGISTRY.items() if spec.role == "regulatory")


@pytest.mark.parametrize("kind", REGULATORY)
def test_regulatory_contract(kind, monkeypatch):
    """Regulatory kinds act between regions, so they are checked in a small model: the
    regulated region's output stays causal, recurrent decoding equals the forward pass,
    every parameter learns, and accounting equals the module."""
    from genome import Genome
    from phenotype import account, decode
    from tests.phenotype.phenotype_helpers import genome_doc

    doc = genome_doc(
        [
            {"base": "T", "kind": "attention", "params": {"heads": 2}},
            {"base": "A", "kind": "swiglu", "params": {}},
        ],
        copies=2,
    )
    doc["regions"].insert(
        1, {"id": "r0", "type": "regulatory", "bases": [{"base": "C", "kind": kind, "params": {}}]}
    )
    if kind == "gate":  # a gate's signal reaches its target through an edge
        doc["edges"] = [{"source": "r0", "target": "c1", "kind": "activates"}]
    genome = Genome.from_dict(doc)
    torch.manual_seed(0)
    model = decode(genome).double()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 61, (B, T), generator=gen)

    logits = model(ids)
    (logits * torch.randn(logits.shape, dtype=logits.dtype, generator=gen)).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {name}"

    model.eval()
    with torch.no_grad():
        logits = model(ids)
        ids2 = ids.clone()
        ids2[:, 6:] = (ids2[:, 6:] + 1) % 61
        torch.testing.assert_close(model(ids2)[:, :6], logits[:, :6], rtol=0, atol=1e-12)
    state, steps = model.init_state(B), []
    for t in range(T):
        out, state = model.step(ids[:, t], state)
        steps.append(out)
    torch.testing.assert_close(torch.stack(steps, 1), logits, rtol=1e-9, atol=1e-9)

    acct = account(genome, seq_len=T)
    assert acct.params == model.num_params()
    with kernels_unseen(monkeypatch):
        flops = counted_flops(model, ids)
    assert flops == B * T * (acct.flops_per_token - model.extra_flops_per_token())
