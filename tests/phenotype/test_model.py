"""Whole models: recurrent decoding equals the parallel forward for genomes mixing many
kinds (regulation, allosteric routing, epigenetic marks, shared and looped regions), the
regulatory kinds behave (causal, trainable), and model-level accounting equals the built
module (parameters, state, FLOPs) for small genomes and every preset (big ones on meta)."""

from __future__ import annotations

import pytest
import torch

from dogma_evolve.genome import PRESETS, Genome, preset
from dogma_evolve.phenotype import account, decode
from dogma_evolve.phenotype.accounting import state_elements as analytic_state
from tests.phenotype.phenotype_helpers import counted_flops, kernels_unseen, state_elements

STRUCTURAL = {"d_model": 32, "vocab": 61, "max_len": 64, "positions": "rope"}


def _base(b, kind, **params):
    return {"base": b, "kind": kind, "params": params}


MIXED_A = {
    "regions": [
        {"id": "s0", "type": "structural", "settings": STRUCTURAL},
        {
            "id": "r1",
            "type": "regulatory",
            "bases": [_base("C", "gate", hidden=8), _base("C", "allosteric", k=1, width=8)],
        },
        {"id": "p2", "type": "promoter", "settings": {"copies": 2}},
        {
            "id": "c2",
            "type": "coding",
            "bases": [
                _base("T", "attention", heads=4, window=4, global_every=2),
                _base("A", "moe", experts=3, top_k=2, hidden=16),
                _base("A", "epigenetic", slots=6),
            ],
        },
        {
            "id": "c3",
            "type": "coding",
            "bases": [
                _base("T", "mamba2", head_dim=16, d_state=4),
                _base("A", "epigenetic", slots=6),
                _base("T", "dna", width=8, reactions=3, d_state=2, species=3, lanes=2, window=2),
                _base("A", "swiglu"),
            ],
        },
        {"id": "r4", "type": "regulatory", "bases": [_base("C", "allosteric", k=2, width=4)]},
        {
            "id": "c4",
            "type": "coding",
            "bases": [
                _base("T", "rwkv"),
                _base("A", "rwkv_channel", hidden=40),
                _base("T", "retention", heads=2),
            ],
        },
        {
            "id": "c5",
            "type": "coding",
            "bases": [
                _base("T", "rwkv"),
                _base("A", "rwkv_channel", hidden=40),
                _base("T", "retention", heads=2),
            ],
        },
    ],
    "edges": [
        {"source": "r1", "target": "c3", "kind": "represses"},
        {"source": "r1", "target": "c2", "kind": "activates"},
        {"source": "c2", "target": "c4", "kind": "loop"},
        {"source": "c4", "target": "c5", "kind": "shares"},
    ],
}

MIXED_B = {
    "regions": [
        {
            "id": "s0",
            "type": "structural",
            "settings": {
                **STRUCTURAL,
                "positions": "learned",
                "norm": "layernorm",
                "norm_position": "post",
                "bias": True,
                "tie_embeddings": False,
            },
        },
        {
            "id": "c1",
            "type": "coding",
            "bases": [
                _base("T", "mla", heads=2, q_rank=8, kv_rank=8, rope_dim=4),
                _base("G", "expression", hidden=24),
                _base("T", "strand_attention", heads=2, scales=2),
                _base("A", "tetra_reach", window=1, stride=2, levels=2, rounds=2),
                _base("T", "s4", d_state=4),
                _base("T", "lstm", hidden=12),
                _base("T", "gru", hidden=10),
                _base("T", "conv", kernel=3),
                _base("T", "linear_attention", heads=2),
                _base("A", "geglu", hidden=24),
                _base("T", "rglru", width=16, heads=2),
                _base("T", "mamba", d_state=4),
                _base("A", "mlp", hidden=40, activation="relu"),
            ],
        },
    ],
}

MIXED_C = {  # ALiBi and the embeddings' norm
    "regions": [
        {
            "id": "s0",
            "type": "structural",
            "settings": {**STRUCTURAL, "positions": "alibi", "norm_position": "pre_embed"},
        },
        {"id": "p1", "type": "promoter", "settings": {"copies": 2, "strength": 0.5}},
        {
            "id": "c1",
            "type": "coding",
            "bases": [
                _base("T", "attention", heads=4, kv_heads=2),
                _base("T", "strand_attention", heads=2, window=3),
            ],
        },
    ],
}

GENOMES = {"mixed_a": MIXED_A, "mixed_b": MIXED_B, "mixed_c": MIXED_C}
B, T = 2, 12


def _model(doc):
    torch.manual_seed(0)
    return decode(Genome.from_dict(doc)).double()


@pytest.mark.parametrize("name", sorted(GENOMES))
def test_model_step_equals_forward_and_holds_its_state(name):
    model = _model(GENOMES[name]).eval()
    ids = torch.randint(0, 61, (B, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids)
    state = model.init_state(B)
    steps = []
    for t in range(T):
        out, state = model.step(ids[:, t], state)
        steps.append(out)
    torch.testing.assert_close(torch.stack(steps, 1), logits, rtol=1e-8, atol=1e-8)
    assert state_elements(state["layers"]) == B * model.state_size(T)


@pytest.mark.parametrize("name", sorted(GENOMES))
def test_model_is_causal_and_trains_every_parameter(name):
    model = _model(GENOMES[name])
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 61, (B, T), generator=gen)
    model.train()
    logits = model(ids)
    loss = (logits * torch.randn(logits.shape, dtype=logits.dtype, generator=gen)).sum()
    (loss + model.aux_loss()).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {pname}"
    model.eval()
    with torch.no_grad():
        ids2 = ids.clone()
        ids2[:, 7:] = (ids2[:, 7:] + 1) % 61
        torch.testing.assert_close(model(ids2)[:, :7], model(ids)[:, :7], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", sorted(GENOMES))
def test_small_model_accounting_equals_the_module(name, monkeypatch):
    genome = Genome.from_dict(GENOMES[name])
    model = _model(GENOMES[name])
    acct = account(genome, seq_len=T)
    assert acct.params == model.num_params()
    assert analytic_state(genome, T) == model.state_size(T)
    short = 3  # within every window: the per-token + fixed figures are exact
    assert acct.state_bytes_per_token * short + acct.state_bytes_fixed == 2 * model.state_size(short)
    ids = torch.randint(0, 61, (B, T))
    with kernels_unseen(monkeypatch):
        flops = counted_flops(model.eval(), ids)
    assert flops == B * T * (acct.flops_per_token - model.extra_flops_per_token())


def test_allosteric_router_wiring():
    from dogma_evolve.phenotype import model_config

    cfg = model_config(Genome.from_dict(MIXED_A))
    routers = {st.region_id: st.routers for st in cfg.stages if hasattr(st, "routers")}
    assert routers["r1"][0].sources == () and routers["r1"][0].targets == ("c2", "c3", "c4", "c5")
    assert routers["r4"][0].sources == ("c2", "c3") and routers["r4"][0].targets == ("c4", "c5")


def test_epigenetic_marks_travel_between_blocks():
    """The second epigenetic block's output depends on the first one's marks."""
    model = _model(MIXED_A).eval()
    ids = torch.randint(0, 61, (1, 6))
    first = model.stages["c2"][2].mixer
    with torch.no_grad():
        base = model(ids)
        first.candidate.weight.mul_(3.0)  # change only what block 1 writes
        changed = model(ids)
    assert not torch.allclose(base, changed)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_accounting_equals_the_built_module(name, monkeypatch):
    genome = preset(name)
    seq = 16
    model = decode(genome, "meta")
    acct = account(genome, seq_len=seq)
    assert acct.params == model.num_params()
    assert acct.active_params <= acct.params
    assert acct.state_bytes_per_token * seq + acct.state_bytes_fixed == 2 * model.state_size(seq)
    assert analytic_state(genome, 10**6) == model.state_size(10**6)
    ids = torch.zeros(1, seq, dtype=torch.long, device="meta")
    with kernels_unseen(monkeypatch):
        flops = counted_flops(model, ids)
    assert flops == seq * (acct.flops_per_token - model.extra_flops_per_token())


def test_meta_decode_holds_after_linspace_was_swapped(monkeypatch):
    """transformers' meta-device loading swaps torch.linspace for a CPU-defaulting wrapper
    (`meta_device_safe_creation_ops`). If torch's device context first lists its factory
    functions inside that window (an lru_cache), the real torch.linspace ignores
    `with torch.device(...)` for the rest of the process: a test process that had loaded an
    exported model first then decoded the DNA and epigenetic blocks with CPU parameters among
    meta ones (an order-dependent CI failure). `decode` must place the phenotype regardless."""
    constructors = torch.utils._device._device_constructors
    linspace = torch.linspace

    def cpu_default(*args, **kwargs):
        kwargs.setdefault("device", "cpu")
        return linspace(*args, **kwargs)

    constructors.cache_clear()
    try:
        monkeypatch.setattr(torch, "linspace", cpu_default)
        with torch.device("meta"):
            torch.zeros(1)  # the device context lists its constructors here, the wrapper among them
        monkeypatch.undo()
        with torch.device("meta"):
            if torch.linspace(0.0, 1.0, 3).device.type == "meta":
                pytest.skip("this torch no longer lets a swapped linspace escape its device context")
        model = decode(preset("dogma"), "meta")
        assert {p.device.type for p in model.parameters()} == {"meta"}
    finally:
        constructors.cache_clear()
        constructors()  # listed again now, outside any patch
