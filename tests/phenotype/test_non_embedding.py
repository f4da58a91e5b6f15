"""The non-embedding parameter count, the N of scaling laws (Kaplan et al. 2020): every
parameter but the token embedding, learned positions and an untied head, against hand counts
of the presets and against the built modules of all of them."""

from __future__ import annotations

import pytest

from dogma_evolve.genome.presets import PRESETS, preset
from dogma_evolve.phenotype import account, decode


def gpt2_small() -> int:
    d, ffn, layers = 768, 3072, 12
    attention = d * 3 * d + 3 * d + d * d + d  # qkv and output projections with biases
    mlp = d * ffn + ffn + ffn * d + d
    norms = 2 * 2 * d  # two LayerNorms (weight, bias) per block
    return layers * (attention + mlp + norms) + 2 * d  # the final LayerNorm


def llama_like(d: int, layers: int, heads: int, kv_heads: int, ffn: int) -> int:
    head_dim = d // heads
    attention = d * d + 2 * d * kv_heads * head_dim + d * d  # q, k, v (grouped), o; no biases
    mlp = 3 * d * ffn  # SwiGLU: gate, up, down
    return layers * (attention + mlp + 2 * d) + d  # two RMSNorms per block, the final one


def mamba_130m() -> int:
    d, inner, state, rank, conv = 768, 1536, 16, 48, 4
    layer = (
        d * 2 * inner  # in_proj
        + inner * conv
        + inner  # depthwise conv1d with bias
        + inner * (rank + 2 * state)  # x_proj: dt, B, C
        + rank * inner
        + inner  # dt_proj with bias
        + inner * state
        + inner  # A_log, D
        + inner * d  # out_proj
        + d  # RMSNorm
    )
    return 24 * layer + d


def rwkv4_169m() -> int:
    d, ffn = 768, 3072
    time_mix = 3 * d + 2 * d + 4 * d * d  # mix_k/v/r, decay, first; key/value/receptance/output
    channel_mix = 2 * d + d * ffn + ffn * d + d * d  # mix_k/r; key, value, receptance
    norms = 2 * 2 * d
    return 12 * (time_mix + channel_mix + norms) + 2 * d + 2 * d  # ln_out and the embeddings' ln0


HAND = {
    "gpt2-small": (gpt2_small(), 124_439_808),
    "llama3-8b": (llama_like(4096, 32, 32, 8, 14336), 8_030_261_248),
    "mistral-7b": (llama_like(4096, 32, 32, 8, 14336), 7_241_732_096),
    "mamba-130m": (mamba_130m(), 129_135_360),
    "rwkv4-169m": (rwkv4_169m(), 169_342_464),
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_non_embedding_params_equal_hand_counts(name):
    non_embedding, total = HAND[name]
    acct = account(preset(name))
    assert acct.params == total
    assert acct.non_embedding_params == non_embedding
    assert acct.embedding_params + acct.non_embedding_params == acct.params


def test_known_figures():
    assert gpt2_small() == 85_056_000  # GPT-2 small's 85M non-embedding parameters
    # Llama 3 8B and Mistral 7B differ only in vocabulary (128,256 untied vs 32,000 untied)
    assert account(preset("llama3-8b")).embedding_params == 2 * 128_256 * 4096


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_non_embedding_params_equal_the_built_module_without_its_vocabulary_matrices(name):
    model = decode(preset(name), "meta")
    vocabulary = {"embed.weight", "pos_embed.weight", "head.weight"}
    expected = sum(p.numel() for n, p in model.named_parameters() if n not in vocabulary)
    assert account(preset(name)).non_embedding_params == expected
