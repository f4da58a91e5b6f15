"""Preset parameter counts, computed here independently from the public configurations'
formulas (not from our config classes), against `phenotype.account`."""

from __future__ import annotations

from dogma_evolve.genome import preset
from dogma_evolve.phenotype import account, model_config


def _llama_like(vocab, d, layers, heads, kv_heads, head_dim, inter, experts=0, top_k=0):
    """Decoder with GQA attention, SwiGLU MLP (or a top-k MoE of SwiGLU experts with a
    bias-free router), two RMSNorms per layer, a final RMSNorm, untied embeddings."""
    attention = d * heads * head_dim + 2 * d * kv_heads * head_dim + heads * head_dim * d
    mlp = 3 * d * inter
    norms = 2 * d
    outer = 2 * vocab * d + d
    if not experts:
        total = layers * (attention + mlp + norms) + outer
        return total, total
    router = d * experts
    total = layers * (attention + experts * mlp + router + norms) + outer
    active = layers * (attention + top_k * mlp + router + norms) + outer
    return total, active


def test_mistral_7b_matches_its_config():
    total, _ = _llama_like(32000, 4096, 32, 32, 8, 128, 14336)
    assert total == 7_241_732_096
    acct = account(preset("mistral-7b"))
    assert acct.params == acct.active_params == total
    assert {
        layer.block.window
        for layer in model_config(preset("mistral-7b")).stages[0].layers
        if hasattr(layer.block, "window")
    } == {4096}


def test_mixtral_8x7b_total_and_active_match_its_config():
    total, active = _llama_like(32000, 4096, 32, 32, 8, 128, 14336, experts=8, top_k=2)
    assert (total, active) == (46_702_792_704, 12_879_925_248)
    acct = account(preset("mixtral-8x7b"))
    assert (acct.params, acct.active_params) == (total, active)


def test_rwkv4_169m_matches_its_checkpoint_layout():
    d, vocab, layers, ffn = 768, 50277, 12, 3072
    time_mix = 4 * d * d + 5 * d  # key, value, receptance, output; decay, first, 3 mixes
    channel_mix = d * ffn + ffn * d + d * d + 2 * d  # key, value, receptance; 2 mixes
    layer_norms = 2 * 2 * d  # ln1, ln2 (weight + bias)
    outer = 2 * vocab * d + 2 * 2 * d  # emb, head; ln0, ln_out
    total = layers * (time_mix + channel_mix + layer_norms) + outer
    assert total == 169_342_464
    assert account(preset("rwkv4-169m")).params == total


def test_jamba_style_matches_jamba_v0_1_less_the_mamba_inner_norms():
    """Jamba-v0.1's config: d 4096, 32 layers in blocks of 8 (attention at offset 4), MoE
    (16 experts, top-2) at odd layers, Mamba (N 16, expand 2, conv 4, Δ-rank 256,
    conv bias, no projection bias, RMS norms on Δ, B, C), vocabulary 65536, untied."""
    d, e, n, r, vocab, inter = 4096, 8192, 16, 256, 65536, 14336
    mamba = (
        d * 2 * e + e * 4 + e + e * (r + 2 * n) + r * e + e + e * n + e + e * d + (r + 2 * n)
    )  # the inner norms on Δ, B, C
    attention = d * 4096 + 2 * d * 1024 + 4096 * d
    mlp, moe = 3 * d * inter, 16 * 3 * d * inter + 16 * d
    moe_active = 2 * 3 * d * inter + 16 * d
    layers = [(attention if i % 8 == 4 else mamba) + (moe if i % 2 else mlp) + 2 * d for i in range(32)]
    active = [
        (attention if i % 8 == 4 else mamba) + (moe_active if i % 2 else mlp) + 2 * d for i in range(32)
    ]
    outer = 2 * vocab * d + d
    hf_total, hf_active = sum(layers) + outer, sum(active) + outer
    inner_norms = 28 * (r + 2 * n)  # what our Mamba leaves out
    acct = account(preset("jamba"))
    assert acct.params == hf_total - inner_norms
    assert acct.active_params == hf_active - inner_norms
    assert round(hf_total / 1e9, 1) == 51.6 and round(hf_active / 1e9) == 12  # as published


def test_griffin_style_layout():
    cfg = model_config(preset("griffin"))
    kinds = [type(layer.block).__name__ for st in cfg.stages for layer in st.layers]
    mixers = [k for k in kinds if k != "GeGLUConfig"]
    assert len(mixers) == 26 and mixers.count("AttentionConfig") == 8
    assert mixers[:3] == ["RGLRUConfig", "RGLRUConfig", "AttentionConfig"]
    d, w, heads, vocab = 2560, 2560, 10, 256000
    rglru = 2 * d * w + w * 5 + 2 * (w * w // heads + w) + w + w * d
    local = d * 10 * 256 + 2 * d * 256 + 10 * 256 * d
    mlp = 3 * d * 7680
    total = 18 * rglru + 8 * local + 26 * (mlp + 2 * d) + vocab * d + d
    assert account(preset("griffin")).params == total


def test_dogma_preset_is_a_regulated_dna_stack():
    cfg = model_config(preset("dogma"))
    kinds = [type(layer.block).__name__ for st in cfg.stages if hasattr(st, "layers") for layer in st.layers]
    assert kinds.count("DNAConfig") == 6 and kinds.count("EpigeneticConfig") == 6
    # the chapter's volumetric TetraMemory (format 2's `tetra`), 8 rounds cover 4096 tokens
    blocks = [layer.block for st in cfg.stages if hasattr(st, "layers") for layer in st.layers]
    tetra = [b for b in blocks if b.kind == "tetra"]
    assert [type(b).__name__ for b in tetra] == ["TetraMeshConfig"] * 2
    assert all((b.side, b.rounds) == (16, 8) for b in tetra)
    regulatory = [st for st in cfg.stages if hasattr(st, "routers")]
    assert regulatory[0].routers[0].targets == ("c2", "c3")
    acct = account(preset("dogma"))
    assert acct.state_bytes_fixed > 0 and acct.params == acct.active_params


def test_dogma_byte_matches_the_chapter_layout_counted_by_hand():
    """16 blocks of (tetra, dna, epigenetic | gate + allosteric | strand attention,
    expression) at d 512, bytes in and out (257 symbols, untied), every count from the blocks'
    documented weights, bias-free."""
    d, v, blocks = 512, 257, 16
    tetra = 3 * d * d + d + 2  # W_q, W_v, W_o; λ per channel; β per scale (2 scales)
    p, r, n, s, lanes, w = 1472, 64, 32, 4, 8, 8
    path_a = (d * r + r) + r * d + 3 * r  # input strands (bias), read-out; k, γ, δ
    path_b = d * (2 * p + 2 * n) + p + p * n + p + p * d  # in; b_Δ, A_log, D; out
    path_c = (d * lanes * s * s + lanes * s * s) + lanes * s * d  # transitions (bias), out
    path_d = d * 3 * p + p * w + p * d  # strand, complement, gate; κ; out
    dna = path_a + path_b + path_c + path_d + (d * 4 + 4)  # and the paths' mixing gate (bias)
    epigenetic = 2 * (d * 256 + 256) + d * 256 + 256 + 256 * d  # read/write gates, candidate, θ, out
    gate, edge = d * 2727 + 2727, 2727 + 1
    targets = [2 * (blocks - i) + 1 for i in range(1, blocks + 1)]  # coding regions after router i
    allosteric = sum(d * 480 + 2 * j * 480 + j for j in targets)  # summary, receptors, response
    strand = 4 * d * 12 * 114 + 12 * (1 + 4)  # q, k, v, o; entropy and 4 stacking terms per head
    expression = d + (d * 1365 + 1365) + (1365 * d + d)  # its own norm, fold in, fold out
    norms = (5 * blocks + 1) * d  # RMSNorm before every layer, and the final one
    total = 2 * v * d + blocks * (tetra + dna + epigenetic + gate + edge + strand + expression)
    total += allosteric + norms
    assert total == 203_453_792
    assert account(preset("dogma-byte")).params == total
